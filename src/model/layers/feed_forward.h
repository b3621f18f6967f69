#pragma once
// The feed-forward half of a decoder layer: a dense SwiGLU MLP or a sparse MoE block.
#include <cstddef>
#include <cstdint>

namespace fp4lm::model {

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  // x [m, hidden] (normed hidden states) -> y [m, hidden], rounded to the activation dtype.
  virtual void forward(const float* x, int64_t m, float* y) const = 0;
  virtual size_t weight_bytes() const = 0;
};

}  // namespace fp4lm::model
