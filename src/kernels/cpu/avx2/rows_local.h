#pragma once
// Helpers for the AVX2 row loops that are compiled once per instruction set
// (avx2/nvfp4_w4a16_rows.h, avx2/nvfp4_w4a4_rows.h): internal linkage only, and no call to an
// inline function of another header, so that no copy built with AVX-VNNI or AVX-512 flags is
// ever the one the linker keeps for the whole program (hence not avx2/common.h's hsum and
// store_act, nor core/dtype.h's f32_to_bf16, whose rounding rows_store repeats).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"

namespace fp4lm::kernels::cpu {
namespace {

// Horizontal sum of 8 lanes in a fixed order (so results never depend on anything but data).
inline float rows_hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// One output element in the activation dtype (bf16: round to nearest even, as f32_to_bf16).
inline void rows_store(void* y, DType t, int64_t i, float v) {
  switch (t) {
    case DType::F32:
      static_cast<float*>(y)[i] = v;
      return;
    case DType::BF16: {
      uint32_t u;
      std::memcpy(&u, &v, 4);
      if ((u & 0x7fffffffu) > 0x7f800000u) {
        static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>((u >> 16) | 0x40);
        return;
      }
      u += 0x7fffu + ((u >> 16) & 1u);
      static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>(u >> 16);
      return;
    }
    default:
      static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT));
      return;
  }
}

// 8 E4M3 block-scale bytes (two 64-element chunks) -> s0 (bytes 0-3), s1 (bytes 4-7): lanes
// [b0, b0, b1, b1, b2, b2, b3, b3], the lane pairs of the loops' block sums, each the scale × 2^-8
// in fp32, exactly: shifted left by 7 (sign moved from bit 14 to 15) an E4M3 byte is the binary16
// of scale × 2^-8 (same exponent field, bias 7 vs 15; subnormals too), and vcvtph2ps is exact.
// NaN bytes are rejected at load.
inline void rows_scales2(const uint8_t* p, __m256& s0, __m256& s1) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  const __m256i w = _mm256_slli_epi16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(b, b)), 7);
  const __m256i h = _mm256_add_epi16(w, _mm256_and_si256(w, _mm256_set1_epi16(0x4000)));
  s0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
  s1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
}

// Software prefetch of a row's chunk c + 64 (2 KiB of codes ahead, into the next rows once a row
// ends: a shard's rows are contiguous; past the end it never faults) into L2: the hardware
// prefetcher ramps up slowly on short row streams (as in the AVX-512 kernels, docs/KERNELS.md).
// Chunks are 64 elements: 32 code bytes, 4 scale bytes. One prefetch per 64 bytes of codes (even
// c: 64 bytes apart, so every line is touched once whatever the row's alignment) and one per 64
// bytes of scales (every 16th chunk); a call for an odd c does nothing.
inline void rows_prefetch(const uint8_t* codes, const uint8_t* scales, int64_t c) {
  constexpr int64_t kAhead = 64;
  if (c & 1) return;
  _mm_prefetch(reinterpret_cast<const char*>(codes + (c + kAhead) * 32), _MM_HINT_T1);
  if ((c & 15) == 0) _mm_prefetch(reinterpret_cast<const char*>(scales + (c + kAhead) * 4), _MM_HINT_T1);
}

// f(b0, b1, t0, tt) for every block [b0, b1) of kRowBlock rows of [r0, r1) and every tile of up
// to kTile tokens (t0 its first token, tt its size): in each block the tiles in turn, each over
// the block's rows, so that the block's codes stay in L2 while the tiles pass. (Orders tried on a
// Zen 3, docs/KERNELS.md: every tile per row, and k-panels across the block, were slower.) f runs
// the block's rows itself: one call per block and tile, not per row.
template <int64_t kRowBlock, int kTile, class F>
inline void rows_by_tiles(int64_t r0, int64_t r1, int64_t m, F&& f) {
  for (int64_t b0 = r0; b0 < r1; b0 += kRowBlock) {
    const int64_t b1 = b0 + kRowBlock < r1 ? b0 + kRowBlock : r1;
    for (int64_t t0 = 0; t0 < m; t0 += kTile) f(b0, b1, t0, static_cast<int>(m - t0 < kTile ? m - t0 : kTile));
  }
}

}  // namespace
}  // namespace fp4lm::kernels::cpu
