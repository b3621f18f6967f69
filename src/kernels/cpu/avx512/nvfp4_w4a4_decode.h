#pragma once
// The AVX-512 W4A4 code decoder shared by the register/panel kernel (nvfp4_w4a4.cpp) and the GEMM
// kernel (nvfp4_w4a4_gemm.cpp): one super-chunk's 128 code bytes -> 4 byte vectors, looked up as
// W + 12 (weights) or A (activations) (docs/KERNELS.md, "AVX-512 W4A4"). Include only from AVX-512
// files (internal linkage, as common.h).
#include "kernels/cpu/avx512/common.h"

namespace fp4lm::kernels::cpu::avx512 {
namespace {

// W + 12 for the code (j & 15) (bit 3 = sign), and A = 2 × E2M1 as int8, for vpermb's 6-bit index.
alignas(64) constexpr uint8_t kWeightU8[64] = {
    12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
    12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
#define FP4LM_A_ROW 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12
alignas(64) constexpr int8_t kActS8[64] = {FP4LM_A_ROW, FP4LM_A_ROW, FP4LM_A_ROW, FP4LM_A_ROW};
#undef FP4LM_A_ROW

constexpr int kVectors = 4;  // byte vectors per super-chunk (P low, P high, Q low, Q high nibbles)
// Per token and super-chunk: 4 activation vectors, the block-sum start values, the scales.
constexpr int kTokenVectors = kVectors + 2;

struct Decoder {
  static constexpr int kVectors = ::fp4lm::kernels::cpu::avx512::kVectors;
  __m512i lut;  // kWeightU8 (weights) or kActS8 (activations)
  __m512i even = _mm512_load_si512(kEvenDwords);
  __m512i odd = _mm512_load_si512(kOddDwords);
  explicit Decoder(const void* table) : lut(_mm512_load_si512(table)) {}

  // 128 code bytes -> z[v], v = 2s + h: byte 4i + b of z[v] is element 16i + 8s + 2b + h,
  // looked up in `lut`.
  inline void operator()(const uint8_t* p, __m512i z[kVectors]) const {
    const __m512i lo = _mm512_loadu_si512(p), hi = _mm512_loadu_si512(p + 64);
    const __m512i pq[2] = {_mm512_permutex2var_epi32(lo, even, hi), _mm512_permutex2var_epi32(lo, odd, hi)};
    for (int s = 0; s < 2; ++s) {
      z[2 * s] = _mm512_permutexvar_epi8(pq[s], lut);
      z[2 * s + 1] = _mm512_permutexvar_epi8(_mm512_srli_epi16(pq[s], 4), lut);
    }
  }
};

}  // namespace
}  // namespace fp4lm::kernels::cpu::avx512
