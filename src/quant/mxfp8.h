#pragma once
// MXFP8 activations as ModelOpt quantizes them (docs/FORMAT.md, "MXFP8"): per block of 32 inputs
// along k, an E8M0 scale 2^e with e = ceil(log2(amax / 448)) clamped to [-127, 127] (-127 for an
// all-zero block; modelopt/torch/quantization/qtensor/mxfp8_tensor.py, _compute_e8m0_exponent),
// then each x -> e4m3(clamp(x / 2^e, ±448)) × 2^e (nearest even). Weights use the same rule at
// export; their E8M0 bytes are stored (2^(byte - 127)).
#include <cstdint>

namespace fp4lm::quant {

inline constexpr int64_t kMxfp8Block = 32;

// The unbiased E8M0 exponent of a block with this amax (finite, >= 0): ceil(log2(amax / 448))
// computed exactly (frexp, not a rounded log2), clamped to [-127, 127].
int mxfp8_exponent(float amax);

// Quantize-dequantize one row of k inputs in place (k % 32 == 0; Error naming k otherwise, and
// naming the element for a NaN / inf).
void mxfp8_qdq_row(float* x, int64_t k);

}  // namespace fp4lm::quant
