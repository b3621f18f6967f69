#pragma once
// What `fp4lm quantize` does with each tensor of a bf16/fp16/fp32 checkpoint: which HF modules
// are NVFP4-quantized and in which groups (members of a group share the weight amax, hence
// weight_scale_2, and the input_scale), and which stay as they are — with the reason, for the
// INFO lines and exclude_modules. Pure planning: it reads shapes and dtypes, never weights.
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "io/checkpoint.h"
#include "model/layer_plan.h"
#include "model/model_config.h"
#include "quant/modelopt_config.h"

namespace fp4lm::engine {

// Where a group's input_scale comes from in calibration.
enum class GroupInput {
  linear,       // the input of engine Linear `layer` (qkv_proj, o_proj, gate_up_proj, ...)
  experts_w13,  // the MoE block input of experts layer `layer`: shared by every expert's gate/up
  experts_w2,   // silu(gate)·up of any expert of `layer`: shared by every expert's down
};

struct QuantGroup {
  std::string layer;                 // engine layer name (calibration key)
  GroupInput input = GroupInput::linear;
  std::vector<std::string> modules;  // HF modules quantized together (one amax)
  std::vector<int64_t> rows;         // out_features of each
  int64_t in_features = 0;
};

struct ExportOptions {
  quant::QuantAlgo algo = quant::QuantAlgo::W4A16_NVFP4;  // NVFP4 or W4A16_NVFP4
  std::vector<std::string> exclude;                        // --exclude patterns (quant::is_excluded rule)
  bool quantize_lm_head = false;
};

struct ExportPlan {
  model::ModelConfig config;
  std::vector<model::LayerSpec> layers;       // plan_layers(config)
  std::vector<QuantGroup> groups;             // model order
  // Every unquantized Linear / router / experts module in model order, then the hybrids' conv1d
  // modules and the "mtp*" / "model.visual*" patterns when the checkpoint has such tensors.
  std::vector<std::string> exclude_modules;
  std::vector<std::string> notes;             // one line per unquantized Linear layer, with its reason
  bool lm_head_quantized = false;
  // Experts layers stored as fused 3-D tensors (`<experts>.gate_up_proj`, `<experts>.down_proj`),
  // by container name: quantized, they are written per expert, as ModelOpt exports them.
  std::vector<std::string> fused_experts;
  std::unordered_map<std::string, size_t> group_index;  // HF module -> index into groups

  // The group a module belongs to, or nullptr when the module is not quantized.
  const QuantGroup* group_of_module(const std::string& module) const;
  // Engine layers whose inputs calibration must observe (NVFP4).
  std::vector<std::string> calibrated_layers() const;
};

// Error (naming the file and tensor) when: the checkpoint is already quantized, the architecture
// is unsupported, a quantized module's weight is missing or has the wrong shape, or a weight is
// not F32/BF16/F16. A fused group partly matched by --exclude is excluded as a whole (a fused
// engine layer cannot mix formats); so is a MoE layer whose experts are partly matched.
ExportPlan make_export_plan(const io::Checkpoint& ckpt, const ExportOptions& opts);

// Makes the experts of fused 3-D tensors (original bf16 Qwen3.5: `<experts>.gate_up_proj`
// [E, 2I, D], gate rows first, and `<experts>.down_proj` [E, D, I]) readable as the per-expert
// `<experts>.<e>.{gate,up,down}_proj.weight` the plan and the quantizer use (views, no copy).
// Call before make_export_plan; the checkpoint's text-model names must already read as model.*.
// Error naming the tensor when a fused tensor has the wrong shape or its partner is missing.
void expose_fused_experts(io::Checkpoint& ckpt);

}  // namespace fp4lm::engine
