#include "kernels/expert_activation.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace fp4lm::kernels {

std::string expert_activation_name(const ExpertActivation& a) {
  std::string s;
  switch (a.gate) {
    case ExpertActivation::Gate::silu: s = "silu"; break;
    case ExpertActivation::Gate::gelu_tanh: s = "gelu_tanh"; break;
    case ExpertActivation::Gate::clamped_swiglu: s = fmt::format("clamped_swiglu(alpha={}, limit={})", a.alpha, a.limit); break;
    case ExpertActivation::Gate::clamped_silu: s = fmt::format("clamped_silu(limit={})", a.limit); break;
  }
  return a.interleaved ? s + " on interleaved gate/up" : s;
}

namespace {

template <typename Fn>
void gated(const float* h13, int64_t inter, bool interleaved, float* out, Fn&& fn) {
  if (interleaved)
    for (int64_t c = 0; c < inter; ++c) out[c] = fn(h13[2 * c], h13[2 * c + 1]);
  else
    for (int64_t c = 0; c < inter; ++c) out[c] = fn(h13[c], h13[inter + c]);
}

}  // namespace

void apply_expert_activation(const ExpertActivation& a, const float* h13, int64_t inter, float* out) {
  switch (a.gate) {
    case ExpertActivation::Gate::silu:
      return gated(h13, inter, a.interleaved, out, [](float g, float u) { return g / (1.0f + std::exp(-g)) * u; });
    case ExpertActivation::Gate::gelu_tanh:
      return gated(h13, inter, a.interleaved, out, [](float g, float u) {
        const float k = 0.7978845608028654f;  // sqrt(2 / pi), as PyTorch's gelu(approximate="tanh")
        return 0.5f * g * (1.0f + std::tanh(k * (g + 0.044715f * g * g * g))) * u;
      });
    case ExpertActivation::Gate::clamped_swiglu: {
      const float alpha = a.alpha, limit = a.limit;
      return gated(h13, inter, a.interleaved, out, [alpha, limit](float g, float u) {
        g = std::min(g, limit);
        u = std::clamp(u, -limit, limit);
        const float glu = g / (1.0f + std::exp(-g * alpha));  // g · sigmoid(alpha · g)
        return (u + 1.0f) * glu;
      });
    }
    case ExpertActivation::Gate::clamped_silu: {
      const float limit = a.limit;
      return gated(h13, inter, a.interleaved, out, [limit](float g, float u) {
        g = std::min(g, limit);
        u = std::clamp(u, -limit, limit);
        return g / (1.0f + std::exp(-g)) * u;
      });
    }
  }
}

}  // namespace fp4lm::kernels
