// MXFP4 (quant_method "mxfp4", gpt-oss): only MoE experts stored in the gpt-oss layout are MXFP4.
// `<box>.gate_up_proj_blocks` U8 [E, 2I, D/32, 16] and `<box>.gate_up_proj_scales` U8 [E, 2I, D/32]
// (rows: gate and up interleaved), `<box>.down_proj_blocks` [E, D, I/32, 16] and
// `<box>.down_proj_scales` [E, D, I/32]; biases `<box>.gate_up_proj_bias` [E, 2I] and
// `<box>.down_proj_bias` [E, D]. Each expert's projection is one Mxfp4View into the mapped
// file (codes element 2j in the low nibble, E8M0 scales), no copy.
#include <fmt/format.h>

#include "core/error.h"
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

class Mxfp4Method final : public QuantMethod {
 public:
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::mxfp4; }

  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override {
    if (tensors(module + "_blocks") == DType::U8 || tensors(module + "_scales") == DType::U8) return quant::Scheme::mxfp4;
    return std::nullopt;
  }

  kernels::QuantKey key(const quant::DiskFormat&, const std::vector<std::string>&, const TensorLookup&) const override {
    return kernels::kMxfp4W4A16;
  }

  kernels::MoeWeights moe(const ParamReader& p, const LayerSpec& spec, const LayerScheme& scheme) const override {
    const std::string& box = spec.shards[0];
    if (spec.expert_layout != LayerSpec::ExpertLayout::gpt_oss)
      fail("{}: {} is MXFP4, which fp4lm reads only for gpt-oss's fused experts (`gate_up_proj_blocks`)",
           p.checkpoint().dir(), spec.name);
    const int64_t e_n = spec.num_experts, inter = spec.inter, hidden = spec.hidden;
    for (int64_t k : {hidden, inter})
      if (k % 32 != 0)
        fail("{}: {}: MXFP4 needs the input width ({}) to be a multiple of 32", p.checkpoint().dir(), spec.name, k);
    struct Param {
      const TensorView *blocks, *scales;
      int64_t rows, k;
    };
    auto param = [&](const std::string& name, int64_t rows, int64_t k) {
      return Param{&p.require(box + "." + name + "_blocks", {DType::U8}, {e_n, rows, k / 32, 16}),
                   &p.require(box + "." + name + "_scales", {DType::U8}, {e_n, rows, k / 32}), rows, k};
    };
    const Param gu = param("gate_up_proj", 2 * inter, hidden), dn = param("down_proj", hidden, inter);
    kernels::MoeWeights mw = moe_without_experts(spec, scheme, p.keepalive());
    auto expert = [&](const Param& t, const std::string& name, int64_t e) {
      kernels::Mxfp4View v;
      v.codes = t.blocks->data + static_cast<size_t>(e * t.rows * (t.k / 2));
      v.scales = t.scales->data + static_cast<size_t>(e * t.rows * (t.k / 32));
      return expert_projection(mw, fmt::format("{}.{}[{}]", box, name, e), t.rows, t.k, v);
    };
    for (int64_t e = 0; e < e_n; ++e) {
      mw.w13.push_back(expert(gu, "gate_up_proj", e));
      mw.w2.push_back(expert(dn, "down_proj", e));
    }
    add_gpt_oss_expert_biases(p, spec, mw);
    return mw;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t,
                           const LayerScheme&) const override {
    fail("{}: {} ({}) is MXFP4, which fp4lm reads only for gpt-oss's fused MoE experts", p.checkpoint().dir(),
         module, spec.name);
  }
};

}  // namespace

const QuantMethod& mxfp4_method() {
  static const Mxfp4Method m;
  return m;
}

}  // namespace fp4lm::model
