#pragma once
// NVFP4 weight export with a searched E4M3 block scale (`fp4lm quantize --weight-method search`):
// per 16-element block, the E4M3 scale among a few codes around ModelOpt's amax/6 rule that
// minimizes the block's (optionally weighted) squared error after E2M1 rounding. The stored layout
// is unchanged (docs/FORMAT.md): only which E4M3 byte a block gets differs, so every loader reads
// the result as it reads ModelOpt's.
#include <cstdint>
#include <optional>

#include "quant/nvfp4.h"

namespace fp4lm::quant {

// E4M3 codes tried below and above the amax/6 rule's code (each code is a 1/8-octave step:
// -4..+2 covers about 0.7x..1.25x the rule's scale). Lower codes clip the block's largest
// elements to ±6 in exchange for a finer grid for the rest.
inline constexpr int kScaleSearchBelow = 4, kScaleSearchAbove = 2;

// The squared error sum_i c_i (x_i - q_i)^2 of one 16-element block quantized with E4M3 byte
// `scale` and global scale s2 (c_i = 1 when `importance` is null). q_i is what dequantize_weight
// gives for the codes quantize_block_codes writes.
double block_error(const float* x, const float* importance, uint8_t scale, float s2);

// The E4M3 byte for one block: weight_block_scale's byte, or a nearby code with a strictly smaller
// error (so never worse than the rule, per block). importance: per-element weights (16 values,
// e.g. the input channels' mean x^2), or null for plain squared error.
uint8_t search_block_scale(const float* x, const float* importance, float s2);

// Writes the block's 8 code bytes (E2M1 round-to-nearest of x / (e4m3(scale) * s2)).
void quantize_block_codes(const float* x, uint8_t scale, float s2, uint8_t* dst);

// quantize_weight with search_block_scale per block. importance: per input channel [k] (shared by
// every row), or null. Same checks and the same all-zero rule as quantize_weight.
Nvfp4Weight quantize_weight_searched(const float* w, int64_t n, int64_t k, std::optional<float> group_amax,
                                     const float* importance = nullptr);

}  // namespace fp4lm::quant
