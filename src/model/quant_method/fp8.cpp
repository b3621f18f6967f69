// FP8 (ModelOpt "FP8"): `<module>.weight` F8_E4M3 [rows, k] with a per-tensor F32 `weight_scale`,
// and a static per-tensor `input_scale` the activations are quantized with (always required).
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

class Fp8Method final : public QuantMethod {
 public:
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::fp8_static; }

 protected:
  kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module, int64_t rows,
                           const LayerScheme&) const override {
    kernels::Fp8View v;
    v.codes = p.require(module + ".weight", {DType::F8_E4M3}, {rows, spec.in_features}).data;
    v.global_scale = *p.scale(module + ".weight_scale", true);
    v.input_scale = *p.scale(module + ".input_scale", true);
    return v;
  }
};

}  // namespace

const QuantMethod& fp8_method() {
  static const Fp8Method m;
  return m;
}

}  // namespace fp4lm::model
