// Unquantized weights: `<module>.weight` [rows, k] in F32, BF16 or F16, used as stored.
// A MoE layer's experts are either per-expert 2-D tensors (`<experts>.<e>.<proj>.weight`, as
// ModelOpt exports them) or, as the original bf16 Qwen3.5 / Qwen3-Next checkpoints store them,
// two fused 3-D tensors without a `.weight` suffix: `<experts>.gate_up_proj` [E, 2I, D] (each
// expert's I gate rows, then its I up rows) and `<experts>.down_proj` [E, D, I]. Both become
// per-expert views into the mapped file, no copy. gpt-oss's bf16 experts (LayerSpec::ExpertLayout::gpt_oss)
// are stored input-major, `<experts>.gate_up_proj` [E, D, 2I] (gate and up columns interleaved) and
// `<experts>.down_proj` [E, I, D], with biases: they are transposed once at load into owned [out, in]
// copies in the stored dtype. Llama 4's fused experts (LayerSpec::fused_input_major) are input-major
// too, without biases and with the gate columns before the up columns: transposed the same way.
// Qwen3-VL-MoE's (LayerSpec::fused_major_by_shape) are either, by gate_up_proj's shape.
#include <cstring>
#include <memory>

#include <fmt/format.h>

#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

class UnquantizedMethod final : public QuantMethod {
 public:
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::unquantized; }

  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override {
    const std::optional<DType> w = tensors(module + ".weight");
    if ((w == DType::BF16 || w == DType::F16 || w == DType::F32) && !tensors(module + ".weight_scale"))
      return quant::Scheme::unquantized;
    return std::nullopt;
  }

  kernels::QuantKey key(const quant::DiskFormat&, const std::vector<std::string>&,
                        const TensorLookup&) const override {
    return kernels::kUnquantized;
  }

  kernels::MoeWeights moe(const ParamReader& p, const LayerSpec& spec, const LayerScheme& scheme) const override {
    const std::string& box = spec.shards[0];
    if (spec.expert_layout == LayerSpec::ExpertLayout::gpt_oss) return gpt_oss_moe(p, spec, scheme);
    if (!p.checkpoint().find(box + ".gate_up_proj")) return QuantMethod::moe(p, spec, scheme);
    const int64_t e_n = spec.num_experts, inter = spec.inter, hidden = spec.hidden;
    if (spec.fused_input_major ||
        (spec.fused_major_by_shape && p.checkpoint().find(box + ".gate_up_proj")->shape != Shape{e_n, 2 * inter, hidden}))
      return gpt_oss_moe(p, spec, scheme);
    const TensorView& gu =
        p.require(box + ".gate_up_proj", {DType::F32, DType::BF16, DType::F16}, {e_n, 2 * inter, hidden});
    const TensorView& dn = p.require(box + ".down_proj", {DType::F32, DType::BF16, DType::F16}, {e_n, hidden, inter});
    const size_t gu_es = dtype_size(gu.dtype), dn_es = dtype_size(dn.dtype);
    kernels::MoeWeights mw = moe_without_experts(spec, scheme, p.keepalive());
    for (int64_t e = 0; e < e_n; ++e) {
      const uint8_t* g = gu.data + static_cast<size_t>(e * 2 * inter * hidden) * gu_es;
      kernels::LinearWeights w13 =
          expert_projection(mw, fmt::format("{}.gate_up_proj[{}] (gate)", box, e), inter, hidden,
                            kernels::DenseView{gu.dtype, g});
      // Gate rows then up rows: two shards of one stored expert.
      w13.n = 2 * inter;
      w13.shards.push_back({fmt::format("{}.gate_up_proj[{}] (up)", box, e), inter,
                            kernels::DenseView{gu.dtype, g + static_cast<size_t>(inter * hidden) * gu_es}});
      mw.w13.push_back(std::move(w13));
      mw.w2.push_back(expert_projection(
          mw, fmt::format("{}.down_proj[{}]", box, e), hidden, inter,
          kernels::DenseView{dn.dtype, dn.data + static_cast<size_t>(e * hidden * inter) * dn_es}));
    }
    return mw;
  }

 private:
  // Input-major experts (gpt-oss, Llama 4), transposed into owned [out, in] copies (one allocation for all).
  static kernels::MoeWeights gpt_oss_moe(const ParamReader& p, const LayerSpec& spec, const LayerScheme& scheme) {
    const std::string& box = spec.shards[0];
    const int64_t e_n = spec.num_experts, inter = spec.inter, hidden = spec.hidden;
    const std::initializer_list<DType> floats = {DType::F32, DType::BF16, DType::F16};
    const TensorView& gu = p.require(box + ".gate_up_proj", floats, {e_n, hidden, 2 * inter});
    const TensorView& dn = p.require(box + ".down_proj", floats, {e_n, inter, hidden});
    const size_t gu_es = dtype_size(gu.dtype), dn_es = dtype_size(dn.dtype);
    const size_t gu_bytes = static_cast<size_t>(e_n * hidden * 2 * inter) * gu_es;
    auto owned = std::make_shared<std::vector<uint8_t>>(gu_bytes + static_cast<size_t>(e_n * inter * hidden) * dn_es);
    // src [e][in][out] -> dst [e][out][in]
    auto transpose = [](const uint8_t* src, uint8_t* dst, int64_t experts, int64_t in, int64_t out, size_t es) {
      for (int64_t e = 0; e < experts; ++e)
        for (int64_t i = 0; i < in; ++i)
          for (int64_t o = 0; o < out; ++o)
            std::memcpy(dst + static_cast<size_t>((e * out + o) * in + i) * es,
                        src + static_cast<size_t>((e * in + i) * out + o) * es, es);
    };
    uint8_t* gu_t = owned->data();
    uint8_t* dn_t = owned->data() + gu_bytes;
    transpose(gu.data, gu_t, e_n, hidden, 2 * inter, gu_es);
    transpose(dn.data, dn_t, e_n, inter, hidden, dn_es);
    kernels::MoeWeights mw = moe_without_experts(spec, scheme, owned);
    for (int64_t e = 0; e < e_n; ++e) {
      mw.w13.push_back(expert_projection(
          mw, fmt::format("{}.gate_up_proj[{}]", box, e), 2 * inter, hidden,
          kernels::DenseView{gu.dtype, gu_t + static_cast<size_t>(e * 2 * inter * hidden) * gu_es}));
      mw.w2.push_back(expert_projection(
          mw, fmt::format("{}.down_proj[{}]", box, e), hidden, inter,
          kernels::DenseView{dn.dtype, dn_t + static_cast<size_t>(e * hidden * inter) * dn_es}));
    }
    if (spec.expert_layout == LayerSpec::ExpertLayout::gpt_oss) add_gpt_oss_expert_biases(p, spec, mw);
    return mw;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme&) const override {
    const TensorView& t =
        p.require(module + ".weight", {DType::F32, DType::BF16, DType::F16}, {rows, spec.in_features});
    return kernels::DenseView{t.dtype, t.data};
  }
};

}  // namespace

const QuantMethod& unquantized_method() {
  static const UnquantizedMethod m;
  return m;
}

}  // namespace fp4lm::model
