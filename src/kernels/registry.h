#pragma once
// The kernel-backend oracle (DESIGN.md §2.4): an ordered table of backends per layer kind and
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
};

// Why `b` cannot run the problem, or "" if it can (availability, scheme, dtype, shape).
std::string rejection_reason(const Backend& b, const LinearProblem& p);
std::string rejection_reason(const Backend& b, const MoeProblem& p);

// The first backend that accepts, or `forced` (a name) when given. Logs each rejection at DEBUG.
// Throws UsageError for an unknown forced name (listing the names), Error when the forced
// backend cannot run the layer (with its reason) or when nothing fits (with every reason).
// `layer` names the layer in messages.
Selection select_linear(const LinearProblem& p, const std::string& layer, const std::string& forced = "");
Selection select_moe(const MoeProblem& p, const std::string& layer, const std::string& forced = "");

// "Using 'NAME' NVFP4 MoE backend out of potential backends: [a, b, c]"
std::string selection_message(const Selection& s, LayerKind kind, QuantKey key);

}  // namespace fp4lm::kernels
