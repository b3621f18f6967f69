#pragma once
// NVFP4 weights decoded to exact bf16 with the E4M3 block scale folded in, for kernels that
// multiply NVFP4 weights as plain bf16 (tile / panel GEMMs; the scalar definition and why it is
// exact: kernels/cpu/nvfp4_bf16.h). Not used by the shipped W4A16 kernels: folding per weight
// costs 6 vector ops per 32 weights, which halved M = 1 decode (docs/KERNELS.md, "W4A16 numbers:
// folded block scales measured"); the fold variant of those kernels is on branch issue-46-w4a16
// (commits 7fa5d46, 1770822). Layout
// as nvfp4_w4a16_decode.h's Decoder: per 256-element super-chunk 8 vectors of 32 bf16, dword lane
// i of every vector holding a pair of block i's elements. Include only from AVX-512 files.
#include "kernels/cpu/avx512/common.h"
#include "kernels/cpu/avx512/nvfp4_w4a16_decode.h"

namespace fp4lm::kernels::cpu::avx512 {
namespace {

// 16 E4M3 bytes -> their exact values as fp32 (e4m3x16_scaled's 2^-8 undone: a power of two).
inline __m512 e4m3x16_f32(const uint8_t* s) { return _mm512_mul_ps(e4m3x16_scaled(s), _mm512_set1_ps(kE4m3ScaledInv)); }

// z: 32 bf16 E2M1 values, dword lane i in block i; s: block i's scale in lane i. Each word × its
// lane's scale in fp32 (the even word moved up to a float's high half, the odd one masked to it);
// the products have at most 6 significant bits, so their low halves are zero and the high halves
// are the exact bf16 (nvfp4_weight_bf16).
inline __m512i fold_block_scales(__m512i z, __m512 s) {
  const __m512 lo = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(z, 16)), s);
  const __m512 hi = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(z, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u)))), s);
  return _mm512_or_si512(_mm512_srli_epi32(_mm512_castps_si512(lo), 16), _mm512_castps_si512(hi));
}

// One super-chunk's 128 code bytes and 16 scale bytes -> 8 vectors of exact bf16 weights.
struct ScaledBf16Decoder {
  static constexpr int kVectors = Decoder::kVectors;
  Decoder dec;
  inline void operator()(const uint8_t* codes, const uint8_t* scales, __m512i z[kVectors]) const {
    dec(codes, z);
    fold(z, e4m3x16_f32(scales));
  }
  // z from Decoder, s from e4m3x16_f32 (or e4m3x16_scaled × 2^8): folded in place.
  static inline void fold(__m512i z[kVectors], __m512 s) {
    for (int v = 0; v < kVectors; ++v) z[v] = fold_block_scales(z[v], s);
  }
};

}  // namespace
}  // namespace fp4lm::kernels::cpu::avx512
