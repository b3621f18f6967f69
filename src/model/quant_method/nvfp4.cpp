// NVFP4, in each family's names. Both store two E2M1 codes a byte [rows, k/2] (element 2i in the
// low nibble) and E4M3 block scales `weight_scale` [rows, k/16] (one per 16 weights); they differ
// in the names of the codes and of the two global scales, and in what those hold:
//  - ModelOpt ("NVFP4" W4A4, "W4A16_NVFP4"): `weight`, `weight_scale_2` = amax/(448*6) and, for
//    W4A4, `input_scale` = activation amax/(448*6); F32 scalars, shape [] or [1].
//  - compressed-tensors (nvfp4-pack-quantized): `weight_packed`, `weight_global_scale` =
//    (448*6)/amax and `input_global_scale`: the reciprocals, stored [1]. fp4lm reads g and uses
//    1.0f/g (as vLLM does), so a file whose g is the float reciprocal of a ModelOpt file's scale
//    runs bit-identically when 1.0f/g gives that scale back (docs/FORMAT.md §7).
// ModelOpt W4A8_NVFP4_FP8 (key nvfp4_w4a8_fp8) stores the same tensors; its weight_scale_2 is
// amax/448 (the dequantization is the same product) and its input_scale the FP8 activation scale
// amax/448, required unless the override runs the layer W4A16.
// W4A16 — on disk or by the activation override — never needs the activation scale: present ones
// are ignored; neither does W4A4 under --activation-scale dynamic (each token's own scale). A fused layer whose shards' global scales differ keeps per-shard scales (the kernels
// apply them per row; kernels/weights.h), in both families.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

bool is_w4a4(const LayerScheme& s) { return s.key.act == kernels::ActKey::nvfp4_dynamic; }
// W4A4 with the file's activation scale (not --activation-scale dynamic): it must be read.
bool static_w4a4(const LayerScheme& s) { return is_w4a4(s) && !s.dynamic_activation_scale; }

struct Nvfp4Names {
  const char* codes;
  const char* global_scale;  // the weight's
  const char* input_scale;   // the activations'
  bool reciprocal;           // the globals hold 1/scale (compressed-tensors)
};

constexpr Nvfp4Names kModelopt{"weight", "weight_scale_2", "input_scale", false};
constexpr Nvfp4Names kCompressedTensors{"weight_packed", "weight_global_scale", "input_global_scale", true};

class Nvfp4Method final : public QuantMethod {
 public:
  explicit Nvfp4Method(Nvfp4Names names) : n_(names) {}

  kernels::WeightKey weight_key() const override { return kernels::WeightKey::nvfp4_static; }

  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override {
    if (tensors(module + "." + n_.codes) != DType::U8 || tensors(module + ".weight_scale") != DType::F8_E4M3)
      return std::nullopt;
    return tensors(module + "." + n_.input_scale) ? quant::Scheme::nvfp4 : quant::Scheme::nvfp4_a16;
  }

  kernels::QuantKey key(const quant::DiskFormat& f, const std::vector<std::string>&,
                        const TensorLookup&) const override {
    if (f.scheme == quant::Scheme::nvfp4_fp8) return kernels::kNvfp4W4A8;
    return f.scheme == quant::Scheme::nvfp4 ? kernels::kNvfp4W4A4 : kernels::kNvfp4W4A16;
  }

  // W4A4 experts: an expert without a usable activation scale takes the max of the layer's other
  // experts', with one WARN per projection naming how many lacked it. Unusable: absent or zero
  // (ModelOpt leaves experts calibration never routed to unset), and in compressed-tensors'
  // reciprocal form also NaN, inf, or exactly 1.0 — what llm-compressor writes in place of the
  // NaN/inf of an expert that saw no tokens — unless every expert holds 1.0, which is then used.
  kernels::MoeWeights moe(const ParamReader& p, const LayerSpec& spec, const LayerScheme& scheme) const override {
    if (!static_w4a4(scheme)) return QuantMethod::moe(p, spec, scheme);
    LayerScheme no_act = scheme;
    no_act.key = kernels::kNvfp4W4A16;  // gather without requiring the activation scale
    kernels::MoeWeights mw = QuantMethod::moe(p, spec, no_act);
    mw.key = scheme.key;
    // The stored activation scales of each expert's w13 shards and w2, as written.
    std::vector<std::vector<std::optional<float>>> raw13, raw2;
    bool all_placeholder = n_.reciprocal;
    auto raw = [&](const std::vector<std::string>& mods) {
      std::vector<std::optional<float>> v;
      for (const auto& m : mods) {
        // ModelOpt: NaN, inf or a negative value is an error; compressed-tensors: see above.
        const std::string name = m + "." + n_.input_scale;
        v.push_back(n_.reciprocal ? p.raw_scale(name) : p.scale(name, false, true));
        all_placeholder &= v.back() == 1.0f;
      }
      return v;
    };
    for (int64_t e = 0; e < spec.num_experts; ++e) {
      auto [w13, w2] = expert_specs(spec, e);
      raw13.push_back(raw(w13.shards));
      raw2.push_back(raw(w2.shards));
    }
    if (all_placeholder)
      log().warn("{}: every expert's {} is 1.0, the value llm-compressor writes for uncalibrated experts; using it",
                 spec.name, n_.input_scale);
    auto fill = [&](const std::vector<std::vector<std::optional<float>>>& raws,
                    std::vector<kernels::LinearWeights>& ws, const char* what) {
      std::vector<std::optional<float>> v;  // per expert: the max of its usable shard scales
      for (const auto& shards : raws) {
        std::optional<float> best;
        for (std::optional<float> r : shards)
          if (std::optional<float> s = usable(r, all_placeholder)) best = std::max(best.value_or(0.0f), *s);
        v.push_back(best);
      }
      float mx = 0;
      int missing = 0;
      for (auto& s : v) s ? mx = std::max(mx, *s) : ++missing;
      if (mx == 0)
        fail("{}: no expert of {} has a usable {} {} (static W4A4 needs one; --activation-scale dynamic computes one "
             "per token instead, --override-activation-dtype bfloat16 runs the layer W4A16)",
             p.checkpoint().dir(), spec.name, what, n_.input_scale);
      if (missing)
        log().warn("{}: {} of {} experts have no usable {} {}; using the max of the others ({})", spec.name, missing,
                   v.size(), what, n_.input_scale, mx);
      for (size_t e = 0; e < ws.size(); ++e) {
        ws[e].key = scheme.key;
        ws[e].input_scale = v[e].value_or(mx);
        for (auto& s : ws[e].shards) s.as<kernels::Nvfp4View>().input_scale = ws[e].input_scale;
      }
    };
    fill(raw13, mw.w13, "gate/up");
    fill(raw2, mw.w2, "down");
    return mw;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme& scheme) const override {
    const int64_t k = spec.in_features;
    if (k % 16 != 0)
      fail("{}: NVFP4 layer {} has in_features {} which is not a multiple of 16", p.checkpoint().dir(), spec.name, k);
    kernels::Nvfp4View v;
    v.codes = p.require(module + "." + n_.codes, {DType::U8}, {rows, k / 2}).data;
    const TensorView* bs = p.checkpoint().find(module + ".weight_scale");
    if (scheme.on_disk.scheme == quant::Scheme::nvfp4_fp8 && bs && k % 32 == 0 && bs->shape == Shape{rows, k / 32}) {
      // W4A8_NVFP4_FP8 as ModelOpt's recipe writes it: one E4M3 scale per 32 weights. Each is
      // written twice into NVFP4's per-16 layout (exact: the same product for every weight).
      const uint8_t* s32 = p.require(module + ".weight_scale", {DType::F8_E4M3}, {rows, k / 32}).data;
      auto s16 = std::make_shared<std::vector<uint8_t>>(static_cast<size_t>(rows * (k / 16)));
      for (int64_t i = 0; i < rows * (k / 32); ++i) (*s16)[2 * i] = (*s16)[2 * i + 1] = s32[i];
      v.block_scales = s16->data();
      v.owned = s16;
    } else if (scheme.on_disk.scheme == quant::Scheme::nvfp4_fp8 && bs && bs->shape != Shape{rows, k / 16}) {
      fail("{}: tensor '{}.weight_scale' of W4A8_NVFP4_FP8 layer {} has shape {}; expected [{}, {}] (blocks of 16) "
           "or [{}, {}] (blocks of 32, ModelOpt's recipe)",
           p.checkpoint().dir(), module, spec.name, shape_str(bs->shape), rows, k / 16, rows, k / 32);
    } else {
      v.block_scales = p.require(module + ".weight_scale", {DType::F8_E4M3}, {rows, k / 16}).data;
    }
    v.global_scale = global(p, module + "." + n_.global_scale);
    if (static_w4a4(scheme)) {
      const std::string name = module + "." + n_.input_scale;
      if (!p.checkpoint().find(name))
        fail("{}: missing tensor '{}' (an F32 scalar scale: the static activation scale of NVFP4 W4A4 layer {}; "
             "--activation-scale dynamic computes one per token instead, --override-activation-dtype bfloat16 runs "
             "the layer W4A16)",
             p.checkpoint().dir(), name, spec.name);
      v.input_scale = global(p, name);
    } else if (scheme.key.act == kernels::ActKey::fp8_static) {
      // W4A8_NVFP4_FP8: the FP8 activation scale (amax / 448), read as stored.
      const std::string name = module + "." + n_.input_scale;
      if (!p.checkpoint().find(name))
        fail("{}: missing tensor '{}' (an F32 scalar: the static FP8 activation scale of W4A8_NVFP4_FP8 layer {}; "
             "--override-activation-dtype bfloat16 runs the layer W4A16 without it)",
             p.checkpoint().dir(), name, spec.name);
      v.input_scale = *p.scale(name, true);
    } else {
      // W4A16 (on disk or by the override) and per-token scales use none: read by design.
      p.acknowledge(module + "." + n_.input_scale);
    }
    return v;
  }

 private:
  // A global scale as the kernels take it (ModelOpt's sense: amax/(448*6)).
  float global(const ParamReader& p, const std::string& name) const {
    const float s = *p.scale(name, true);
    return n_.reciprocal ? 1.0f / s : s;
  }

  // An expert's activation scale in ModelOpt's sense, or nullopt when it is unusable (see moe()).
  std::optional<float> usable(std::optional<float> raw, bool placeholder_ok) const {
    if (!raw || !std::isfinite(*raw) || *raw <= 0) return std::nullopt;
    if (!n_.reciprocal) return raw;
    if (*raw == 1.0f && !placeholder_ok) return std::nullopt;
    return 1.0f / *raw;
  }

  Nvfp4Names n_;
};

}  // namespace

const QuantMethod& nvfp4_method() {
  static const Nvfp4Method m(kModelopt);
  return m;
}

const QuantMethod& compressed_tensors_nvfp4_method() {
  static const Nvfp4Method m(kCompressedTensors);
  return m;
}

}  // namespace fp4lm::model
