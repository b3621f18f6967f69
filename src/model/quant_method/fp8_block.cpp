// Block-wise FP8 (docs/FORMAT.md §10): `<module>.weight` F8_E4M3 [rows, k] and one scale per
// block of block_n rows × block_k columns, [ceil(rows/block_n), ceil(k/block_k)], F32 (DeepSeek,
// Qwen) or BF16/F16, each finite and > 0 — named `weight_scale_inv` by DeepSeek / transformers'
// "fp8" (multiplied all the same: w = e4m3 × scale) and `weight_scale` by compressed-tensors.
// A fused layer's shards keep their own grids (q/k/v, gate/up are quantized separately). Which
// key runs a layer: W8A8 with per-token-group dynamic activations as stored (fp8_block; the
// reference backend emulates it, the W8A16 backends serve it at 16-bit activations, as vLLM's
// Marlin does on GPUs without FP8), weight-only for compressed-tensors' W8A16 block groups.
#include <cmath>
#include <optional>
#include <vector>

#include "core/error.h"
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

class Fp8BlockMethod final : public QuantMethod {
 public:
  explicit Fp8BlockMethod(const char* scale_suffix) : scale_suffix_(scale_suffix) {}

  kernels::WeightKey weight_key() const override { return kernels::WeightKey::fp8_block; }

  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override {
    if (tensors(module + ".weight") == DType::F8_E4M3 && tensors(module + scale_suffix_).has_value())
      return quant::Scheme::fp8_block;
    return std::nullopt;
  }

  kernels::QuantKey key(const quant::DiskFormat& f, const std::vector<std::string>&,
                        const TensorLookup&) const override {
    return f.scheme == quant::Scheme::fp8_block_a16 ? kernels::kFp8BlockW8A16 : kernels::kFp8Block;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme& scheme) const override {
    kernels::Fp8BlockView v;
    v.block_n = scheme.on_disk.block_n;
    v.block_k = scheme.on_disk.block_k;
    if (v.block_n <= 0 || v.block_k <= 0)
      fail("{}: block-wise FP8 module {} without a block size in its config", p.checkpoint().dir(), module);
    const int64_t k = spec.in_features;
    v.codes = p.require(module + ".weight", {DType::F8_E4M3}, {rows, k}).data;
    v.scale_cols = (k + v.block_k - 1) / v.block_k;
    const int64_t grid_rows = (rows + v.block_n - 1) / v.block_n;
    const std::string name = module + scale_suffix_;
    const TensorView& t = p.require(name, {DType::F32, DType::BF16, DType::F16}, {grid_rows, v.scale_cols});
    v.scales.resize(static_cast<size_t>(grid_rows * v.scale_cols));
    to_f32_n(t.data, t.dtype, v.scales.data(), v.scales.size());
    for (size_t i = 0; i < v.scales.size(); ++i)
      if (!std::isfinite(v.scales[i]) || v.scales[i] <= 0)
        fail("{}: block scale [{}, {}] must be finite and positive, found {}", p.where(name), i / v.scale_cols,
             i % v.scale_cols, v.scales[i]);
    return v;
  }

 private:
  const char* scale_suffix_;
};

}  // namespace

const QuantMethod& fp8_block_method() {
  static const Fp8BlockMethod m(".weight_scale_inv");
  return m;
}

const QuantMethod& compressed_tensors_fp8_block_method() {
  static const Fp8BlockMethod m(".weight_scale");
  return m;
}

}  // namespace fp4lm::model
