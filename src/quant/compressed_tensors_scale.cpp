#include "quant/compressed_tensors_scale.h"

#include <cmath>

#include "quant/nvfp4.h"

namespace fp4lm::quant {

float compressed_tensors_global_scale(float amax) {
  const float g = (1.0f / amax) * kNvfp4GlobalDivisor;
  return std::isfinite(g) ? g : 1.0f;
}

}  // namespace fp4lm::quant
