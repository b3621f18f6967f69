// ModelOpt's int8 exports (docs/FORMAT.md, "W8A16 and W8A8_SQ_PER_CHANNEL"), as ModelOpt 0.47.0's
// INT8_WEIGHT_ONLY_CFG / INT8_SMOOTHQUANT_CFG write them, per Linear module:
//   `weight`          I8 [n, k]: round_half_even(w / weight_scale) clamped to [-128, 127];
//   `weight_scale`    F32 [n]: row amax / 127 (finite and > 0);
//   W8A8_SQ_PER_CHANNEL only:
//   `pre_quant_scale` [k]: SmoothQuant's input smoothing, applied to x by model::Linear (as for
//                     every format; read_pre_quant_scale) — required here: the export always
//                     writes it, and the smoothed weights mean nothing without it;
//   `input_scale`     F32 scalar: activation amax / 127; x · pre_quant_scale is quantized to int8
//                     with it (key int8_w8a8).
// w[r, j] = weight[r, j] × weight_scale[r] (kernels::Int8View, the codes in place).
#include <cmath>
#include <optional>
#include <vector>

#include "core/error.h"
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

class ModeloptInt8Method final : public QuantMethod {
 public:
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::int8; }

  std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const override {
    if (tensors(module + ".weight") != DType::I8) return std::nullopt;
    return tensors(module + ".input_scale") ? quant::Scheme::int8_sq : quant::Scheme::int8_a16;
  }

  kernels::QuantKey key(const quant::DiskFormat& f, const std::vector<std::string>&, const TensorLookup&) const override {
    return f.scheme == quant::Scheme::int8_sq ? kernels::kInt8W8A8 : kernels::kInt8W8A16;
  }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme& scheme) const override {
    const int64_t k = spec.in_features;
    const bool sq = scheme.on_disk.scheme == quant::Scheme::int8_sq;
    const char* algo = sq ? "W8A8_SQ_PER_CHANNEL" : "W8A16";
    kernels::Int8View v;
    const std::string wname = module + ".weight", sname = module + ".weight_scale";
    if (!p.checkpoint().find(wname))
      fail("{}: missing tensor '{}' ({}: I8 weights [{}, {}])", p.checkpoint().dir(), wname, algo, rows, k);
    v.codes = reinterpret_cast<const int8_t*>(p.require(wname, {DType::I8}, {rows, k}).data);
    if (!p.checkpoint().find(sname))
      fail("{}: missing tensor '{}' ({}: an F32 scale per output channel, shape [{}])", p.checkpoint().dir(), sname,
           algo, rows);
    const TensorView& s = p.require(sname, {DType::F32}, {rows});
    v.row_scales.resize(static_cast<size_t>(rows));
    to_f32_n(s.data, s.dtype, v.row_scales.data(), v.row_scales.size());
    for (int64_t r = 0; r < rows; ++r)
      if (!std::isfinite(v.row_scales[r]) || v.row_scales[r] <= 0)
        fail("{}: scale of row {} must be finite and positive, found {}", p.where(sname), r, v.row_scales[r]);
    if (sq) {
      const std::string pq = module + ".pre_quant_scale";
      if (!p.checkpoint().find(pq))
        fail("{}: missing tensor '{}' (W8A8_SQ_PER_CHANNEL: SmoothQuant's per-input-channel scale, shape [{}])",
             p.checkpoint().dir(), pq, k);
      v.input_scale = *p.scale(module + ".input_scale", true);
    }
    return v;
  }
};

}  // namespace

const QuantMethod& modelopt_int8_method() {
  static const ModeloptInt8Method m;
  return m;
}

}  // namespace fp4lm::model
