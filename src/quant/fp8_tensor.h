#pragma once
// ModelOpt's per-tensor FP8 fake quantization with the amax of the tensor itself (an input
// quantizer left uncalibrated: W4A8_MXFP4_FP8_CFG has no calibration algorithm, so each call's
// amax is taken; modelopt/torch/quantization/tensor_quant.py, _fp8_eager): scale = 448 / amax
// (amax <= 2^-24 counts as 1), x -> e4m3(clamp(x · scale, ±448)) · (1 / scale), in float32 and in
// that order (not x / (amax / 448), which can round a tie the other way).
#include <algorithm>
#include <cstddef>

#include "core/dtype.h"

namespace fp4lm::quant {

inline void fp8_qdq_dynamic_tensor(float* x, size_t n, float amax) {
  const float safe = amax <= 1.0f / 16777216.0f ? 1.0f : amax;
  const float scale = 448.0f / safe, inv = 1.0f / scale;
  for (size_t i = 0; i < n; ++i) x[i] = e4m3_to_f32(f32_to_e4m3(std::clamp(x[i] * scale, -448.0f, 448.0f))) * inv;
}

}  // namespace fp4lm::quant
