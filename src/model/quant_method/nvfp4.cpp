// NVFP4 (ModelOpt "NVFP4" W4A4 and "W4A16_NVFP4"): `<module>.weight` U8 [rows, k/2] (two E2M1
// codes a byte), `weight_scale` F8_E4M3 [rows, k/16] (one per 16 weights), `weight_scale_2` an
// F32 scalar; W4A4 also needs `input_scale`. W4A16 — on disk or by the activation override —
// never needs input_scale: present ones are ignored.
#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

bool is_w4a4(const LayerScheme& s) { return s.key.act == kernels::ActKey::nvfp4_dynamic; }

class Nvfp4Method final : public QuantMethod {
 public:
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::nvfp4_static; }

  // W4A4 experts: a missing or zero input_scale takes the max of the layer's other experts
  // (ModelOpt leaves it unset for experts calibration never routed to), with one WARN per
  // projection naming how many experts lacked it.
  kernels::MoeWeights moe(const ParamReader& p, const LayerSpec& spec, const LayerScheme& scheme) const override {
    if (!is_w4a4(scheme)) return QuantMethod::moe(p, spec, scheme);
    LayerScheme no_act = scheme;
    no_act.key = kernels::kNvfp4W4A16;  // gather without requiring input_scale
    kernels::MoeWeights mw = QuantMethod::moe(p, spec, no_act);
    mw.key = scheme.key;
    std::vector<std::optional<float>> in13, in2;
    auto read = [&](const std::vector<std::string>& mods) {
      std::optional<float> v;
      for (const auto& m : mods)
        if (auto s = p.scale(m + ".input_scale", false, true); s && *s > 0) v = std::max(v.value_or(0.0f), *s);
      return v;
    };
    for (int64_t e = 0; e < spec.num_experts; ++e) {
      auto [w13, w2] = expert_specs(spec, e);
      in13.push_back(read(w13.shards));
      in2.push_back(read(w2.shards));
    }
    auto fill = [&](std::vector<std::optional<float>>& v, std::vector<kernels::LinearWeights>& ws, const char* what) {
      float mx = 0;
      int missing = 0;
      for (auto& s : v) s ? mx = std::max(mx, *s) : ++missing;
      if (mx == 0)
        fail("{}: no expert of {} has a usable {} input_scale (W4A4 needs one)", p.checkpoint().dir(), spec.name,
             what);
      if (missing)
        log().warn("{}: {} of {} experts have no {} input_scale; using the max of the others ({})", spec.name,
                   missing, v.size(), what, mx);
      for (size_t e = 0; e < ws.size(); ++e) {
        ws[e].key = scheme.key;
        ws[e].input_scale = v[e].value_or(mx);
        for (auto& s : ws[e].shards) s.as<kernels::Nvfp4View>().input_scale = ws[e].input_scale;
      }
    };
    fill(in13, mw.w13, "gate/up");
    fill(in2, mw.w2, "down");
    return mw;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme& scheme) const override {
    const int64_t k = spec.in_features;
    if (k % 16 != 0)
      fail("{}: NVFP4 layer {} has in_features {} which is not a multiple of 16", p.checkpoint().dir(), spec.name, k);
    kernels::Nvfp4View v;
    v.codes = p.require(module + ".weight", {DType::U8}, {rows, k / 2}).data;
    v.block_scales = p.require(module + ".weight_scale", {DType::F8_E4M3}, {rows, k / 16}).data;
    v.global_scale = *p.scale(module + ".weight_scale_2", true);
    if (is_w4a4(scheme)) v.input_scale = *p.scale(module + ".input_scale", true);
    return v;
  }
};

}  // namespace

const QuantMethod& nvfp4_method() {
  static const Nvfp4Method m;
  return m;
}

}  // namespace fp4lm::model
