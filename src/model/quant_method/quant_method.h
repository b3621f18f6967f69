#pragma once
// A quantization method (vLLM's config -> method -> kernel): for one weight format, which
// tensors a Linear or MoE layer has on disk, their names, dtypes, shapes and scale rules, and
// the per-format view (kernels/weights.h) the backend receives. ModelLoader resolves a layer's
// scheme and dispatches here; it knows no format. A new format is one file in this folder plus
// a line in quant_method.cpp.
#include <string>
#include <utility>

#include "kernels/weights.h"
#include "model/layer_plan.h"
#include "model/layer_scheme.h"
#include "model/param_reader.h"

namespace fp4lm::model {

class QuantMethod {
 public:
  virtual ~QuantMethod() = default;
  virtual kernels::WeightKey weight_key() const = 0;

  // Every shard of a Linear layer (stacked along n) and its bias, validated. input_scale of the
  // result is the max over the shards' (the shared input is quantized once).
  kernels::LinearWeights linear(const ParamReader& p, const LayerSpec& spec, const LayerScheme& scheme) const;
  // Every expert of a MoE layer as two Linears (w13 = gate then up rows, w2 = down).
  virtual kernels::MoeWeights moe(const ParamReader& p, const LayerSpec& spec, const LayerScheme& scheme) const;

 protected:
  // The view of one HF module `module` holding `rows` rows of `spec` (in_features k).
  virtual kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module,
                                   int64_t rows, const LayerScheme& scheme) const = 0;
  // Expert e of a MoE layer as its two Linear specs {w13, w2}.
  static std::pair<LayerSpec, LayerSpec> expert_specs(const LayerSpec& moe, int64_t e);
};

// The method of a weight format.
const QuantMethod& quant_method(kernels::WeightKey key);

const QuantMethod& unquantized_method();
const QuantMethod& nvfp4_method();
const QuantMethod& fp8_method();

}  // namespace fp4lm::model
