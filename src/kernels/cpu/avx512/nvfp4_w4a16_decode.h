#pragma once
// The AVX-512 W4A16 weight decoder shared by the register/panel kernel (nvfp4_w4a16.cpp), the
// GEMM kernel (nvfp4_w4a16_gemm.cpp) and int4's (int4_w4a16_bf16.cpp): one super-chunk's 128 code
// bytes -> 8 vectors of 32 bf16 values (E2M1, or int4's code - 8) (the layout: docs/KERNELS.md, "AVX-512 W4A16"). Include only from AVX-512 files
// (internal linkage, as common.h).
#include "kernels/cpu/avx512/common.h"

namespace fp4lm::kernels::cpu::avx512 {
namespace {

// bf16 of the E2M1 code (j & 15), bit 3 = sign, for vpermw's 5-bit index.
alignas(64) constexpr uint16_t kE2m1Bf16[32] = {
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0,
    0x0000, 0x3F00, 0x3F80, 0x3FC0, 0x4000, 0x4040, 0x4080, 0x40C0,
    0x8000, 0xBF00, 0xBF80, 0xBFC0, 0xC000, 0xC040, 0xC080, 0xC0C0};

constexpr int kVectors = 8;  // bf16 weight vectors per super-chunk

struct Decoder {
  static constexpr int kVectors = ::fp4lm::kernels::cpu::avx512::kVectors;
  // `table`: the bf16 value of each 4-bit code (32 entries, the upper 16 repeating the lower):
  // E2M1 for NVFP4, code - 8 for int4 (avx512/int4_w4a16_bf16.cpp), whose codes share the layout.
  explicit Decoder(const uint16_t* table = kE2m1Bf16) : lut(_mm512_load_si512(table)) {}
  __m512i lut;
  __m512i even = _mm512_load_si512(kEvenDwords);
  __m512i odd = _mm512_load_si512(kOddDwords);

  // 128 code bytes -> z[v], v = 4s + q: word 2i + j of z[v] is element 16i + 8s + 4j + q.
  inline void operator()(const uint8_t* p, __m512i z[kVectors]) const {
    const __m512i lo = _mm512_loadu_si512(p), hi = _mm512_loadu_si512(p + 64);
    const __m512i pq[2] = {_mm512_permutex2var_epi32(lo, even, hi), _mm512_permutex2var_epi32(lo, odd, hi)};
    for (int s = 0; s < 2; ++s) {
      z[4 * s + 0] = _mm512_permutexvar_epi16(pq[s], lut);
      z[4 * s + 1] = _mm512_permutexvar_epi16(_mm512_srli_epi16(pq[s], 4), lut);
      z[4 * s + 2] = _mm512_permutexvar_epi16(_mm512_srli_epi16(pq[s], 8), lut);
      z[4 * s + 3] = _mm512_permutexvar_epi16(_mm512_srli_epi16(pq[s], 12), lut);
    }
  }
};

}  // namespace
}  // namespace fp4lm::kernels::cpu::avx512
