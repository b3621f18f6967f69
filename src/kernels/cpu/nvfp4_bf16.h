#pragma once
// An NVFP4 weight as an exact bf16: E2M1 value × its E4M3 block scale (the FP32 tensor scale is
// left to the epilogue). Exact because an E2M1 value has at most 2 significant bits and an E4M3
// scale at most 4 (subnormal scales fewer), so the product has at most 6 (bf16 holds 8), and it
// lies in [2^-10, 6 × 448 = 2688] (or is ±0), far inside bf16's normal range. The AMX panels
// (amx_panels.cpp) decode to these bits; a SIMD decoder that folds the block scale into the
// weights (docs/KERNELS.md, "W4A16 numbers") is tested against this scalar form. NaN scale bytes (0x7F / 0xFF) are rejected at load (nvfp4_matrix.cpp).
#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace fp4lm::kernels::cpu {

// bf16 bits of e2m1(code & 15) × e4m3(scale); the float product is exact, so its high half is.
inline uint16_t nvfp4_weight_bf16(uint8_t code, uint8_t scale) {
  const float v = e2m1_to_f32(static_cast<uint8_t>(code & 15)) * e4m3_to_f32(scale);
  uint32_t u;
  std::memcpy(&u, &v, 4);
  return static_cast<uint16_t>(u >> 16);
}

}  // namespace fp4lm::kernels::cpu
