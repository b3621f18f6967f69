#pragma once
// ggml's block formats decoded to float32, as ggml's own dequantize_row_* functions compute them
// (what a GGUF file's weights are): F32, F16, BF16, and the 32-element blocks Q8_0 (f16 d, 32 × i8:
// x = d·q), Q4_0 (f16 d, 16 bytes of nibbles: x = d·(q − 8)) and Q4_1 (f16 d, f16 m, nibbles:
// x = d·q + m). In a 4-bit block the low nibbles are elements 0–15 and the high nibbles 16–31.
#include <cstdint>

namespace fp4lm::quant {

// Whether ggml_dequantize decodes ggml type id `type`.
bool ggml_can_dequantize(uint32_t type);

// Decodes `numel` elements of ggml type `type` from `src` (numel a multiple of the type's block
// size) into `dst`. Error for a type it cannot decode (naming it).
void ggml_dequantize(uint32_t type, const uint8_t* src, float* dst, uint64_t numel);

}  // namespace fp4lm::quant
