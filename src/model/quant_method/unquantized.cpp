// Unquantized weights: `<module>.weight` [rows, k] in F32, BF16 or F16, used as stored.
#include "model/quant_method/quant_method.h"

namespace fp4lm::model {

namespace {

class UnquantizedMethod final : public QuantMethod {
 public:
  kernels::WeightKey weight_key() const override { return kernels::WeightKey::unquantized; }

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
