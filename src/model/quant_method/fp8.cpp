// FP8 (ModelOpt "FP8"): `<module>.weight` F8_E4M3 [rows, k] with an F32 `weight_scale`, per
// tensor (shape [] / [1]) or per channel ([rows] / [rows, 1], F32/BF16/F16), and a static
// per-tensor `input_scale`, needed only by the W8A8 scheme (fp8): W8A16 (fp8_w8a16, or the
// W8A16 backends that serve both) never quantizes activations.
#include <cmath>

#include "core/error.h"
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

class Fp8Method final : public QuantMethod {
 public:
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::fp8_static; }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme& scheme) const override {
    kernels::Fp8View v;
    v.codes = p.require(module + ".weight", {DType::F8_E4M3}, {rows, spec.in_features}).data;
    const TensorView* ws = p.checkpoint().find(module + ".weight_scale");
    if (ws && rows > 1 && !ws->shape.empty() && ws->shape[0] == rows)
      v.row_scales = row_scales(p, module + ".weight_scale", rows);
    else
      v.global_scale = *p.scale(module + ".weight_scale", true);
    if (scheme.key.act == kernels::ActKey::fp8_static) v.input_scale = *p.scale(module + ".input_scale", true);
    return v;
  }

 private:
  // A per-channel scale: [rows] or [rows, 1], F32/BF16/F16, each finite and > 0.
  static std::vector<float> row_scales(const ParamReader& p, const std::string& name, int64_t rows) {
    const TensorView& t = *p.checkpoint().find(name);
    if (t.shape != Shape{rows} && t.shape != Shape{rows, 1})
      fail("{}: expected a scalar or a per-channel scale of shape [{}] or [{}, 1], found {}", p.where(name), rows,
           rows, shape_str(t.shape));
    p.check(name, t, {DType::F32, DType::BF16, DType::F16}, t.shape);
    std::vector<float> v(static_cast<size_t>(rows));
    to_f32_n(t.data, t.dtype, v.data(), v.size());
    for (int64_t r = 0; r < rows; ++r)
      if (!std::isfinite(v[r]) || v[r] <= 0)
        fail("{}: scale of row {} must be finite and positive, found {}", p.where(name), r, v[r]);
    return v;
  }
};

}  // namespace

const QuantMethod& fp8_method() {
  static const Fp8Method m;
  return m;
}

}  // namespace fp4lm::model
