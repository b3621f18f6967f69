#pragma once
// The kernel-backend oracle (docs/ARCHITECTURE.md, "Loading a model"): an ordered table of backends per layer kind and
// the selection rule.
#include <optional>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace fp4lm::kernels {

// All registered backends of a kind, in priority order.
std::vector<const Backend*> backends(LayerKind kind);
std::vector<const Backend*> all_backends();
const Backend* find_backend(const std::string& name, LayerKind kind);  // nullptr if unknown

struct Selection {
  const Backend* backend = nullptr;
  std::vector<std::string> candidates;  // the kind's backends for the layer's weight format, in order
  // A forced backend that cannot run this layer: why not. The layer then keeps the oracle's
  // choice (`backend`); the loader errs only when the forced backend runs no layer at all.
  std::string forced_rejection;
};

// Why `b` cannot run the problem, or "" if it can (availability, scheme, dtype, shape).
std::string rejection_reason(const Backend& b, const LinearProblem& p);
std::string rejection_reason(const Backend& b, const MoeProblem& p);

// `forced` (a name) when given and it can run the layer, else the first backend that accepts
// (with forced_rejection set when a forced one could not). Logs each rejection at DEBUG.
// Throws UsageError for an unknown forced name (listing the names), Error when nothing fits
// (with every reason). `layer` names the layer in messages.
Selection select_linear(const LinearProblem& p, const std::string& layer, const std::string& forced = "");
Selection select_moe(const MoeProblem& p, const std::string& layer, const std::string& forced = "");

// "Using 'NAME' NVFP4 MoE backend out of potential backends: [a, b, c]"
std::string selection_message(const Selection& s, LayerKind kind, QuantKey key);

}  // namespace fp4lm::kernels
