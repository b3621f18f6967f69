#pragma once
// ModelOpt's int8 fake quantization of activations (W8A8_SQ_PER_CHANNEL's static per-tensor input
// quantizer; modelopt/torch/quantization/tensor_quant.py, _tensor_quant with narrow_range False):
// q = clamp(round_half_even(x / scale), -128, 127), used as q × scale. ModelOpt multiplies by
// 127 / amax where fp4lm divides by the stored input_scale = amax / 127: the two can differ in the
// last bit of x / scale (a tie then rounds the other way; never seen on the fixtures).
#include <algorithm>
#include <cmath>

namespace fp4lm::quant {

// nearbyint rounds half to even in the default rounding mode, as torch.round.
inline float int8_qdq(float x, float scale) { return std::clamp(std::nearbyint(x / scale), -128.0f, 127.0f) * scale; }

}  // namespace fp4lm::quant
