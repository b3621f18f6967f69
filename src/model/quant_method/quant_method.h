#pragma once
// A quantization method (vLLM's config -> method -> kernel): for one weight format, which
// tensors a Linear or MoE layer has on disk, their names, dtypes, shapes and scale rules, and
// the per-format view (kernels/weights.h) the backend receives; which tensors say a module holds
// its format (detect), and which kernel key runs it (key). ModelLoader resolves a layer's
// scheme and dispatches here; it knows no format. A new format is one file in this folder plus
// a line in quant_method.cpp.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/weights.h"
#include "model/layer_plan.h"
#include "model/layer_scheme.h"
#include "model/load/param_reader.h"

namespace fp4lm::model {

class QuantMethod {
 public:
  virtual ~QuantMethod() = default;
  // The weight format of the views this method builds: the key's weight must be it
  // (resolve_scheme checks).
  virtual kernels::WeightKey weight_key() const = 0;
  // The scheme `module`'s tensors hold in this method's names, or nullopt when they are not
  // this method's.
  virtual std::optional<quant::Scheme> detect(const TensorLookup& tensors, const std::string& module) const = 0;
  // The kernel key that runs a layer of `modules` stored as `f` (tensors may be empty).
  virtual kernels::QuantKey key(const quant::DiskFormat& f, const std::vector<std::string>& modules,
                                const TensorLookup& tensors) const = 0;

  // Every shard of a Linear layer (stacked along n) and its bias, validated. input_scale of the
  // result is the max over the shards' (the shared input is quantized once).
  kernels::LinearWeights linear(const ParamReader& p, const LayerSpec& spec, const LayerScheme& scheme) const;
  // Every expert of a MoE layer as two Linears (w13 = gate then up rows, w2 = down).
  virtual kernels::MoeWeights moe(const ParamReader& p, const LayerSpec& spec, const LayerScheme& scheme) const;

 protected:
  // The view of one HF module `module` holding `rows` rows of `spec` (in_features k).
  virtual kernels::ShardView shard(const ParamReader& p, const LayerSpec& spec, const std::string& module,
                                   int64_t rows, const LayerScheme& scheme) const = 0;
  // The gpt-oss experts' biases `<box>.gate_up_proj_bias` [E, 2I] and `<box>.down_proj_bias` [E, D]
  // (float dtypes) into mw's w13 / w2 (float32).
  static void add_gpt_oss_expert_biases(const ParamReader& p, const LayerSpec& spec, kernels::MoeWeights& mw);
  // Expert e of a MoE layer as its two Linear specs {w13, w2}.
  static std::pair<LayerSpec, LayerSpec> expert_specs(const LayerSpec& moe, int64_t e);
  // A MoE layer's weights with no expert yet (key, sizes, what keeps the data alive).
  static kernels::MoeWeights moe_without_experts(const LayerSpec& spec, const LayerScheme& scheme,
                                                 std::shared_ptr<const void> keepalive);
  // One expert projection of `mw` held as a single view of `rows` x `k` (fused stores).
  static kernels::LinearWeights expert_projection(const kernels::MoeWeights& mw, std::string name, int64_t rows,
                                                  int64_t k, kernels::ShardView view);
};

// AWQ's per-input-channel activation scale of a Linear layer (`<module>.pre_quant_scale` [k],
// F32/BF16/F16, each value finite and > 0, as float32; empty when no shard stores one): x is
// multiplied by it before it is quantized (model::Linear applies it; docs/FORMAT.md, "AWQ
// pre_quant_scale"). Read the same way whatever the weight format. The shards of a fused layer
// share one input, so they must all store the same scale or none (Error naming them).
std::vector<float> read_pre_quant_scale(const ParamReader& p, const LayerSpec& spec);

// The method that reads a format.
const QuantMethod& quant_method(const quant::DiskFormat& f);
// What `module`'s tensors hold, recognized by the family's methods; unquantized when none
// recognizes them.
quant::Scheme detect_scheme(quant::Family family, const TensorLookup& tensors, const std::string& module);

const QuantMethod& unquantized_method();
const QuantMethod& nvfp4_method();                     // ModelOpt's names
const QuantMethod& compressed_tensors_nvfp4_method();  // compressed-tensors' names, reciprocal scales
const QuantMethod& fp8_method();                       // the same names in both families
const QuantMethod& fp8_block_method();                 // block-wise FP8: weight_scale_inv
const QuantMethod& compressed_tensors_fp8_block_method();  // block-wise FP8: weight_scale
const QuantMethod& modelopt_fp8_pb_wo_method();        // ModelOpt FP8_PB_WO: weight_scale per 128 x 128
const QuantMethod& modelopt_mxfp8_method();            // ModelOpt MXFP8: E8M0 weight_scale per 32
const QuantMethod& mxfp4_method();                     // MXFP4: gpt-oss's `*_blocks` / `*_scales` experts
const QuantMethod& gptq_method();                      // int4: GPTQ's qweight / qzeros / scales / g_idx
const QuantMethod& awq_method();                       // int4: AutoAWQ GEMM's qweight / qzeros / scales
const QuantMethod& compressed_tensors_int4_method();   // int4: pack-quantized weight_packed / weight_scale
const QuantMethod& modelopt_int4_method();             // int4: ModelOpt W4A16_AWQ's U8 weight / weight_scale
const QuantMethod& modelopt_mxfp4_method();            // ModelOpt W4A8_MXFP4_FP8: U8 codes, E8M0 weight_scale per 32
const QuantMethod& modelopt_int8_method();             // int8: ModelOpt W8A16 / W8A8_SQ's I8 weight, row weight_scale

}  // namespace fp4lm::model
