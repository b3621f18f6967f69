#pragma once
// Activations travel through the engine as float32; where a 16-bit engine would store a tensor
// (hidden states, attention outputs, KV entries) we round it to the activation dtype, so the
// numerics match a bf16/fp16 engine that accumulates in fp32.
#include <cmath>
#include <cstddef>

#include "core/dtype.h"

namespace fp4lm::model {

// Rounds x[0, n) in place to the nearest value representable in `t` (F32: unchanged).
void round_to_dtype(float* x, size_t n, DType t);

inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
// GELU, tanh approximation (PyTorch's gelu(approximate="tanh"), HF "gelu_pytorch_tanh").
inline float gelu_tanh(float x) {
  const float k = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

}  // namespace fp4lm::model
