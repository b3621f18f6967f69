#pragma once
// `fp4lm quantize`: a bf16/fp16/fp32 Hugging Face checkpoint in, a ModelOpt-layout NVFP4 or
// W4A16_NVFP4 checkpoint out (docs/FORMAT.md bit for bit; export plan in engine/quantize/export_plan.h,
// calibration in engine/quantize/calibration.h, file formats in quant/export_format.h).
//
// The output is written into a temporary directory beside OUT and renamed to OUT at the very
// end, so an interrupted run leaves no OUT. Tensors stream one at a time (quantized groups one
// member at a time, in row chunks), so memory stays bounded whatever the model size.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/quantize/calibration.h"
#include "engine/quantize/export_plan.h"
#include "quant/quant_config.h"

namespace fp4lm::engine {

// How each weight block is rounded (docs/QUANTIZE.md): ModelOpt's amax/6 block scale and
// round-to-nearest; the E4M3 block scale searched for the least squared error (weighted by the
// input channels' mean x^2 when calibration ran); GPTQ error feedback against the calibrated
// H = X^T X (scale search per block). MoE experts fused into one layer have no per-expert inputs
// recorded: under gptq they take the searched scale.
enum class WeightMethod { rtn, search, gptq };
const char* weight_method_name(WeightMethod m);

struct QuantizeOptions {
  std::string model_dir, out_dir;
  ExportOptions exp;
  // --format: ModelOpt's names and configs, or compressed-tensors' (weight_packed,
  // weight_global_scale / input_global_scale = the reciprocals, [1]; no hf_quant_config.json).
  quant::Family format = quant::Family::modelopt;
  uint64_t max_shard_bytes = 5'000'000'000ull;  // --max-shard-size (5GB)
  bool force = false;                           // replace an existing OUT
  // Calibration token sequences; required for NVFP4 (W4A4) and for --weight-method gptq; with
  // W4A16_NVFP4 they serve the weight method only (no input_scale is written).
  std::vector<std::vector<int32_t>> calibration;
  WeightMethod weight_method = WeightMethod::rtn;
  // gptq: columns in decreasing input energy, block scales fixed up front (measured better on
  // SmolLM2: docs/ACCURACY.md).
  bool act_order = true;
  // AWQ (quant/nvfp4_awq.h, ModelOpt's awq_lite): each calibrated Linear group's weights scaled per
  // input channel by s, the input by pre_quant_scale = 1/s (stored per module; NVFP4 is then
  // written as NVFP4_AWQ), before the weight method rounds them. Needs calibration data.
  bool awq = false;
  // With gptq or awq (which hold a k x k H per Linear input), calibrate and quantize one decoder
  // layer at a time (calibrate_by_layer): memory holds one layer's H, not every layer's. Off: the
  // whole model at once (the same result; a test seam).
  bool calibrate_by_layer = true;
  std::string producer_version = "0.1.0";
  bool progress = true;  // progress bar with ETA when stderr is a terminal
  // Called after each output tensor is written (name). A test seam: throwing from it
  // interrupts the run like a failure would.
  std::function<void(const std::string&)> after_tensor;
};

struct QuantizeSummary {
  std::vector<std::string> exclude_modules;
  size_t quantized_modules = 0, tensors = 0;
  std::vector<std::string> shard_files;
  uint64_t tensor_bytes = 0;
  int64_t calibration_tokens = 0;
  double seconds = 0;
};

// Error (exit 1) naming the file/tensor on bad input; UsageError when NVFP4 has no calibration
// data. OUT existing without `force` -> Error; OUT being the input directory -> Error.
QuantizeSummary quantize_checkpoint(const QuantizeOptions& opts);

// The amax of a group's weights over all its members (what sets the shared weight_scale_2),
// computed from the checkpoint's dtype in row chunks.
float group_weight_amax(const io::Checkpoint& ckpt, const QuantGroup& g);

}  // namespace fp4lm::engine
