#pragma once
// NVFP4 (W4A4) calibration: run the unquantized model over calibration token sequences and keep
// the running max |x| of every quantized layer's input (ModelOpt's max calibration). The
// quantizer turns each max into input_scale = amax / 2688.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/quantize/export_plan.h"
#include "io/checkpoint.h"

namespace fp4lm::engine {

// What calibration saw of one Linear's input x[rows, k], for the weight methods that weigh the
// rounding error by it (quant/nvfp4_scale_search.h, quant/nvfp4_gptq.h).
struct InputStats {
  int64_t k = 0, rows = 0;
  std::vector<double> sq;  // [k]: sum over rows of x_c^2 (when CalibrationOptions::second_moments)
  std::vector<double> h;   // [k, k] row-major, upper triangle: sum x x^T (when ::hessians), else empty
  // [k] (when CalibrationOptions::awq): sum over rows of |x_c| (AWQ's mean |x|) and max |x_c|
  // (the W4A4 input_scale of x·pre_quant_scale), else empty
  std::vector<double> abs_sum;
  std::vector<float> abs_max;
};

struct ActivationAmax {
  std::map<std::string, float> linear;       // engine Linear layer (qkv_proj, gate_up_proj, lm_head, ...)
  std::map<std::string, float> experts_w13;  // experts layer -> max |MoE block input| over routed tokens
  std::map<std::string, float> experts_w2;   // experts layer -> max |act(gate, up)| (its expert activation) over every routed expert
  std::map<std::string, InputStats> inputs;  // engine Linear layer -> its input statistics (when asked)
  int64_t sequences = 0, tokens = 0;

  // The amax of a group's input (Error naming the layer when calibration never saw it).
  float of(const QuantGroup& g) const;
};

struct CalibrationOptions {
  bool progress = true;  // a progress line on stderr when it is a terminal
  // Per Linear input: the channels' sum of squares, and the k x k sum x x^T (GPTQ's H; k^2 doubles
  // per distinct Linear input, held until the export ends).
  bool second_moments = false, hessians = false;
  // Per Linear input: the channels' sum and max of |x| (AWQ, quant/nvfp4_awq.h).
  bool awq = false;
};

// Loads the model from `ckpt` unquantized (activations in the checkpoint's dtype), runs each
// sequence from an empty KV cache and observes the inputs of the plan's groups. MoE w2 inputs
// are recomputed from the unquantized expert weights for the routing the model reports, so every
// routed (token, expert) pair counts. Error on an empty sequence list, on a token id outside the
// vocabulary, or when a sequence is longer than the model's maximum length.
ActivationAmax calibrate(std::shared_ptr<io::Checkpoint> ckpt, const ExportPlan& plan,
                         const std::vector<std::vector<int32_t>>& sequences, const CalibrationOptions& opts = {});

// The same observations, one decoder layer at a time (memory: one layer's statistics plus the
// calibration tokens' hidden states [tokens, hidden] in float32, instead of every layer's k x k H):
// each layer is loaded as a pipeline stage (model::LoadOptions first_layer / end_layer) and runs
// every sequence from the stored output of the layer before; `sink` then receives that layer's
// Linear input statistics (with the amax maps as complete as that layer) and they are dropped.
// The last stage holds lm_head. Architectures whose layers read K/V across a cut (Gemma 4's KV
// sharing) calibrate the whole model at once and call `sink` once. Same errors as calibrate().
using StatsSink = std::function<void(const ActivationAmax& amax, std::map<std::string, InputStats>& inputs)>;
ActivationAmax calibrate_by_layer(std::shared_ptr<io::Checkpoint> ckpt, const ExportPlan& plan,
                                  const std::vector<std::vector<int32_t>>& sequences, const CalibrationOptions& opts,
                                  const StatsSink& sink);

}  // namespace fp4lm::engine
