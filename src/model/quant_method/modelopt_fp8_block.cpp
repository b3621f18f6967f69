// ModelOpt's two block-scaled FP8 exports (docs/FORMAT.md, "FP8_PB_WO" and "MXFP8"), both held
// as block-FP8 views (kernels::Fp8BlockView) so the block-FP8 kernels run them:
//  - FP8_PB_WO: `<m>.weight` F8_E4M3 [rows, k] and `<m>.weight_scale` F32 = block amax / 448 per
//    128 × 128 block (partial blocks at the edges), stored as the quantizer's amax grid
//    [ceil(rows/128), 1, ceil(k/128), 1] (squeezed to [] for one block); [R, C] is read too.
//    Weight-only: activations stay in the engine's dtype.
//  - MXFP8: `<m>.weight` F8_E4M3 [rows, k] and `<m>.weight_scale` U8 [rows, k/32], each byte an
//    E8M0 exponent: w = e4m3 × 2^(byte - 127), blocks of 1 × 32, the scale decoded to float32
//    exactly (a power of two); 0xFF (E8M0's NaN) is an error. Activations are MXFP8 at run time
//    (key mxfp8; the reference backend, or model::Linear's pass before the W8A16 kernels).
#include <cmath>
#include <optional>
#include <vector>

#include "core/error.h"
#include "model/quant_method/quant_method.h"
#include "quant/modelopt_config.h"
#include "quant/mxfp8.h"

namespace fp4lm::model {

namespace {

class ModeloptFp8BlockMethod : public QuantMethod {
 public:
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::fp8_block; }

 protected:
  // The weight codes and an empty view with the format's block.
  kernels::Fp8BlockView codes(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                              int64_t block_n, int64_t block_k) const {
    kernels::Fp8BlockView v;
    v.block_n = block_n;
    v.block_k = block_k;
    v.codes = p.require(module + ".weight", {DType::F8_E4M3}, {rows, spec.in_features}).data;
    v.scale_cols = (spec.in_features + block_k - 1) / block_k;
    return v;
  }
};

class Fp8PbWoMethod final : public ModeloptFp8BlockMethod {
 public:
  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override {
    if (tensors(module + ".weight") == DType::F8_E4M3 && tensors(module + ".weight_scale") == DType::F32)
      return quant::Scheme::fp8_block_a16;
    return std::nullopt;
  }
  kernels::QuantKey key(const quant::DiskFormat&, const std::vector<std::string>&, const TensorLookup&) const override {
    return kernels::kFp8BlockW8A16;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme&) const override {
    constexpr int64_t B = quant::kFp8PbWoBlock;
    kernels::Fp8BlockView v = codes(p, spec, module, rows, B, B);
    const int64_t grid_rows = (rows + B - 1) / B, cols = v.scale_cols;
    const std::string name = module + ".weight_scale";
    const TensorView* t = p.checkpoint().find(name);  // its shape says which grid form; require() checks and records it
    if (!t)
      fail("{}: missing tensor '{}' (FP8_PB_WO: F32 block scales [{}, 1, {}, 1] for the {} x {} blocks of [{}, {}])",
           p.checkpoint().dir(), name, grid_rows, cols, B, B, rows, spec.in_features);
    const Shape& s = t->shape;
    const bool one_block = grid_rows * cols == 1 && (s.empty() || s == Shape{1});
    if (!one_block && s != Shape{grid_rows, 1, cols, 1} && s != Shape{grid_rows, cols})
      fail("{}: FP8_PB_WO layer {} needs one scale per 128 x 128 block of its [{}, {}] weight: shape [{}, 1, {}, 1] "
           "(or [{}, {}]{}), found {}",
           p.where(name), spec.name, rows, spec.in_features, grid_rows, cols, grid_rows, cols,
           grid_rows * cols == 1 ? ", [] or [1]" : "", shape_str(s));
    p.require(name, {DType::F32}, s);
    v.scales.resize(static_cast<size_t>(grid_rows * cols));
    to_f32_n(t->data, t->dtype, v.scales.data(), v.scales.size());
    for (size_t i = 0; i < v.scales.size(); ++i)
      if (!std::isfinite(v.scales[i]) || v.scales[i] <= 0)
        fail("{}: block scale [{}, {}] must be finite and positive, found {}", p.where(name), i / cols, i % cols,
             v.scales[i]);
    return v;
  }
};

class Mxfp8Method final : public ModeloptFp8BlockMethod {
 public:
  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override {
    if (tensors(module + ".weight") == DType::F8_E4M3 && tensors(module + ".weight_scale") == DType::U8)
      return quant::Scheme::mxfp8;
    return std::nullopt;
  }
  kernels::QuantKey key(const quant::DiskFormat&, const std::vector<std::string>&, const TensorLookup&) const override {
    return kernels::kMxfp8;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme&) const override {
    const int64_t k = spec.in_features, B = quant::kMxfp8Block;
    if (k % B != 0)
      fail("{}: MXFP8 layer {}: in_features {} is not a multiple of the 32-element scale block", p.checkpoint().dir(),
           spec.name, k);
    kernels::Fp8BlockView v = codes(p, spec, module, rows, 1, B);
    const std::string name = module + ".weight_scale";
    const TensorView& t = p.require(name, {DType::U8}, {rows, k / B});
    v.scales.resize(static_cast<size_t>(rows * v.scale_cols));
    for (size_t i = 0; i < v.scales.size(); ++i) {
      const uint8_t e = t.data[i];
      if (e == 0xFF)
        fail("{}: E8M0 scale [{}, {}] is 0xFF (NaN)", p.where(name), i / v.scale_cols, i % v.scale_cols);
      v.scales[i] = std::ldexp(1.0f, static_cast<int>(e) - 127);
    }
    return v;
  }
};

}  // namespace

const QuantMethod& modelopt_fp8_pb_wo_method() {
  static const Fp8PbWoMethod m;
  return m;
}

const QuantMethod& modelopt_mxfp8_method() {
  static const Mxfp8Method m;
  return m;
}

}  // namespace fp4lm::model
