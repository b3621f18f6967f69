#pragma once
// NVFP4 (W4A4) calibration: run the unquantized model over calibration token sequences and keep
// the running max |x| of every quantized layer's input (ModelOpt's max calibration). The
// quantizer turns each max into input_scale = amax / 2688.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/quantize/export_plan.h"
#include "io/checkpoint.h"

namespace fp4lm::engine {

struct ActivationAmax {
  std::map<std::string, float> linear;       // engine Linear layer (qkv_proj, gate_up_proj, lm_head, ...)
  std::map<std::string, float> experts_w13;  // experts layer -> max |MoE block input| over routed tokens
  std::map<std::string, float> experts_w2;   // experts layer -> max |act(gate, up)| (its expert activation) over every routed expert
  int64_t sequences = 0, tokens = 0;

  // The amax of a group's input (Error naming the layer when calibration never saw it).
  float of(const QuantGroup& g) const;
};

struct CalibrationOptions {
  bool progress = true;  // a progress line on stderr when it is a terminal
};

// Loads the model from `ckpt` unquantized (activations in the checkpoint's dtype), runs each
// sequence from an empty KV cache and observes the inputs of the plan's groups. MoE w2 inputs
// are recomputed from the unquantized expert weights for the routing the model reports, so every
// routed (token, expert) pair counts. Error on an empty sequence list, on a token id outside the
// vocabulary, or when a sequence is longer than the model's maximum length.
ActivationAmax calibrate(std::shared_ptr<io::Checkpoint> ckpt, const ExportPlan& plan,
                         const std::vector<std::vector<int32_t>>& sequences, const CalibrationOptions& opts = {});

}  // namespace fp4lm::engine
