#pragma once
// What the AVX-512 GEMM kernels (nvfp4_w4a16_gemm.cpp, nvfp4_w4a4_gemm.cpp) share: vectors of 16
// output rows, built from the register kernels' block-lane layout by a 16 × 16 dword transpose,
// and the output store of 16 rows in the activation dtype with store_act's exact conversions.
// Include only from AVX-512 files (internal linkage, as common.h).
#include "kernels/cpu/avx512/common.h"

namespace fp4lm::kernels::cpu::avx512 {
namespace {

constexpr int kLanes = 16;  // rows per row vector; also blocks per super-chunk

// 16 vectors a[r] (lane i) -> b[i] (lane r).
inline void transpose16(const __m512i a[kLanes], __m512i b[kLanes]) {
  __m512i t[kLanes], u[kLanes];
  for (int j = 0; j < 8; ++j) {
    t[2 * j] = _mm512_unpacklo_epi32(a[2 * j], a[2 * j + 1]);
    t[2 * j + 1] = _mm512_unpackhi_epi32(a[2 * j], a[2 * j + 1]);
  }
  for (int j = 0; j < 4; ++j) {
    u[4 * j + 0] = _mm512_unpacklo_epi64(t[4 * j], t[4 * j + 2]);
    u[4 * j + 1] = _mm512_unpackhi_epi64(t[4 * j], t[4 * j + 2]);
    u[4 * j + 2] = _mm512_unpacklo_epi64(t[4 * j + 1], t[4 * j + 3]);
    u[4 * j + 3] = _mm512_unpackhi_epi64(t[4 * j + 1], t[4 * j + 3]);
  }
  // u[4j + e], 128-bit lane L: rows 4j..4j+3 at column 4L + e; a 4 × 4 transpose of 128-bit lanes.
  for (int e = 0; e < 4; ++e) {
    const __m512i v0 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0x44), v1 = _mm512_shuffle_i32x4(u[e], u[4 + e], 0xEE);
    const __m512i v2 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0x44),
                  v3 = _mm512_shuffle_i32x4(u[8 + e], u[12 + e], 0xEE);
    b[0 + e] = _mm512_shuffle_i32x4(v0, v2, 0x88);
    b[4 + e] = _mm512_shuffle_i32x4(v0, v2, 0xDD);
    b[8 + e] = _mm512_shuffle_i32x4(v1, v3, 0x88);
    b[12 + e] = _mm512_shuffle_i32x4(v1, v3, 0xDD);
  }
}

// Decodes `rows` rows (at most 16; the rest zero) into one row vector's panel, by the register
// kernels' decoder `dec` (Dec::kVectors vectors per super-chunk, dword lane i = block i):
// panel[(i * chunks + c) * (Dec::kVectors + 1) + v] lane r = row r's dword (block i, vector v) of
// super-chunk c, and vector Dec::kVectors lane r = row r's block scale × 2^-8.
template <class Dec>
void decode_row_vector(const Dec& dec, const uint8_t* const* codes, const uint8_t* const* scales, int rows,
                       int64_t k, __m512i* panel) {
  const int64_t chunks = super_chunks(k);
  TailBuffer tail;
  __m512i z[kLanes][Dec::kVectors], s[kLanes];
  for (int64_t c = 0; c < chunks; ++c) {
    for (int r = 0; r < kLanes; ++r) {
      if (r < rows) {
        const SuperChunk sc = super_chunk(codes[r], scales[r], k, c, tail);
        dec(sc.codes, z[r]);
        s[r] = _mm512_castps_si512(e4m3x16_scaled(sc.scales));
      } else {
        for (int v = 0; v < Dec::kVectors; ++v) z[r][v] = _mm512_setzero_si512();
        s[r] = _mm512_setzero_si512();
      }
    }
    __m512i col[kLanes], out[kLanes];
    for (int v = 0; v <= Dec::kVectors; ++v) {
      for (int r = 0; r < kLanes; ++r) col[r] = v < Dec::kVectors ? z[r][v] : s[r];
      transpose16(col, out);
      for (int i = 0; i < kLanes; ++i) _mm512_store_si512(panel + (i * chunks + c) * (Dec::kVectors + 1) + v, out[i]);
    }
  }
}

// The first `rows` of 16 lanes (all for rows >= 16).
inline __mmask16 lane_mask(int rows) { return static_cast<__mmask16>(rows >= kLanes ? 0xFFFF : (1u << rows) - 1); }

// 16 fp32 results -> y[at, at + 16) in `act`, lanes in `mask`, as store_act does each: bf16 by
// round to nearest even in integers, NaN quieted, subnormals kept (vcvtneps2bf16 would flush
// them); f16 by vcvtps2ph round to nearest.
inline void store16_act(void* y, DType act, int64_t at, __mmask16 mask, __m512 o) {
  switch (act) {
    case DType::F32:
      _mm512_mask_storeu_ps(static_cast<float*>(y) + at, mask, o);
      return;
    case DType::BF16: {
      const __m512i u = _mm512_castps_si512(o);
      const __m512i rounded = _mm512_srli_epi32(
          _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)),
                           _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1))),
          16);
      const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)),
                                                    _mm512_set1_epi32(0x7f800000));
      const __m512i quiet = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(0x40));
      _mm256_mask_storeu_epi16(static_cast<uint16_t*>(y) + at, mask,
                               _mm512_cvtepi32_epi16(_mm512_mask_blend_epi32(nan, rounded, quiet)));
      return;
    }
    default:
      _mm256_mask_storeu_epi16(static_cast<uint16_t*>(y) + at, mask,
                               _mm512_cvtps_ph(o, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
      return;
  }
}

}  // namespace
}  // namespace fp4lm::kernels::cpu::avx512
