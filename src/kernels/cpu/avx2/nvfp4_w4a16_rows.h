#pragma once
// The AVX2 W4A16 row loop (docs/KERNELS.md, "W4A16 inner loop"), compiled once per instruction
// set by the file that includes it, after defining FP4LM_W4A16_DOT:
//   0  avx2/nvfp4_w4a16.cpp: vpmaddwd, and vpaddd to sum the 4 vectors of a chunk;
//   1  avxvnni/nvfp4_w4a16.cpp: vpmaddwd, then 3 vpdpwssd (AVX-VNNI, VEX: Intel client CPUs);
//   2  avx512/nvfp4_w4a16_vnni_twin.cpp: the same with EVEX vpdpwssd (AVX512-VNNI + VL), the
//      AVX-VNNI variant's test twin on CPUs that have AVX-512 but not AVX-VNNI.
// The int32 sums are exact in all three (below 2^30, and vpdpwssd does not saturate), so they
// give the same bits. Everything here has internal linkage and calls no inline function of
// another header (std::min, f32_to_bf16, ...): a copy compiled with AVX-VNNI or AVX-512 flags
// must never be the one the linker keeps for the whole program.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/avx2/nvfp4.h"
#include "kernels/cpu/avx2/rows_local.h"

#ifndef FP4LM_W4A16_DOT
#error "define FP4LM_W4A16_DOT (0, 1 or 2) before including nvfp4_w4a16_rows.h"
#elif FP4LM_W4A16_DOT == 1
#define FP4LM_DPWSSD _mm256_dpwssd_avx_epi32
#elif FP4LM_W4A16_DOT == 2
#define FP4LM_DPWSSD _mm256_dpwssd_epi32
#endif

namespace fp4lm::kernels::cpu {

namespace {

constexpr int64_t kChunk = 64;                 // elements per step: 32 code bytes, 4 blocks
constexpr int64_t kRowBlock = kNvfp4RowBlock;  // rows whose codes stay in L1/L2 while all token tiles pass
constexpr int kTokTile = 4;                    // tokens sharing one decoded chunk in registers

// Per 64-element chunk of a row: 4 vectors of 16 int16 weights (2 × E2M1 × 256), vector v word
// i = element 4i + {0, 2, 1, 3}[v], and the block scales lane d = E4M3 scale of block d/2 × 2^-8.
struct Decoder {
  __m256i low4 = _mm256_set1_epi8(0x0f);
  __m256i high8 = _mm256_set1_epi16(static_cast<short>(0xFF00));
  // 2 × E2M1 as int8, indexed by the 4-bit code (bit 3 = sign).
  __m256i lut = _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  // 4 scale bytes -> words [b0, b0, b1, b1, b2, b2, b3, b3].
  __m128i dup = _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1);
  __m128i bit14 = _mm_set1_epi16(0x4000);

  // 32 code bytes (element 2j in byte j's low nibble) -> w[0..3]. Byte j of `lo` is element 2j,
  // of `hi` element 2j + 1; shifting a word left by 8 keeps its even byte, masking keeps its odd
  // one, each as a signed value × 256 (exact products; int32 sums of 8 stay below 2^30).
  inline void weights(const uint8_t* p, __m256i w[4]) const {
    const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(c, low4));
    const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(c, 4), low4));
    w[0] = _mm256_slli_epi16(lo, 8);
    w[1] = _mm256_and_si256(lo, high8);
    w[2] = _mm256_slli_epi16(hi, 8);
    w[3] = _mm256_and_si256(hi, high8);
  }
  // 4 E4M3 bytes -> 8 fp32 lanes, lane d = scale of block d/2 × 2^-8, exactly: shifted left by 7
  // (sign moved from bit 14 to 15) an E4M3 byte is the binary16 of scale × 2^-8 (same exponent
  // field, bias 7 vs 15; subnormals too), and vcvtph2ps is exact. NaN bytes are rejected at load.
  inline __m256 scales(uint32_t bytes) const {
    const __m128i wv = _mm_slli_epi16(_mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(bytes)), dup), 7);
    return _mm256_cvtph_ps(_mm_add_epi16(wv, _mm_and_si128(wv, bit14)));
  }
  // (Two chunks' 8 bytes at once: rows_scales2, avx2/rows_local.h, 8 ops instead of 12.)
};

// The exact int32 sums of one (row, token) chunk: lane d = Σ over elements 8d..8d+7 of
// (2 × E2M1 × 256) × q, then acc += float(sum) × (sw × sa). float(sum) is exact (a multiple of
// 256 below 2^30), sw × sa is exact (4 significant bits × a power of two, normal), so the FMA is
// the only rounding. Two pieces (float32 x): the second piece's sum joins the first as
// float(sum0) + float(sum1) × 2^-15 (one more rounding) before the same FMA.
inline __m256i piece_sum(const __m256i w[4], const int16_t* q) {
  const __m256i* x = reinterpret_cast<const __m256i*>(q);
  __m256i s = _mm256_madd_epi16(w[0], _mm256_loadu_si256(x));
#if FP4LM_W4A16_DOT == 0
  s = _mm256_add_epi32(s, _mm256_madd_epi16(w[1], _mm256_loadu_si256(x + 1)));
  s = _mm256_add_epi32(s, _mm256_madd_epi16(w[2], _mm256_loadu_si256(x + 2)));
  return _mm256_add_epi32(s, _mm256_madd_epi16(w[3], _mm256_loadu_si256(x + 3)));
#else
  for (int v = 1; v < 4; ++v) s = FP4LM_DPWSSD(s, w[v], _mm256_loadu_si256(x + v));
  return s;
#endif
}
template <int P>
inline __m256 chunk_step(const __m256i w[4], __m256 sw, const int16_t* q, const float* sa, __m256 acc) {
  __m256 f = _mm256_cvtepi32_ps(piece_sum(w, q));
  if constexpr (P == 2) f = _mm256_fmadd_ps(_mm256_cvtepi32_ps(piece_sum(w, q + kChunk)), _mm256_set1_ps(0x1p-15f), f);
  return _mm256_fmadd_ps(f, _mm256_mul_ps(sw, _mm256_loadu_ps(sa)), acc);
}

// out[t] for one row and T tokens (token t's q at q0 + t * P * k64, factors at sa0 + t * k64 / 8):
// each chunk of the row is decoded once and used by the T tokens. One row at a time (measured
// per core at 4096², M = 1: 34 G weights/s against 31 for 2 rows side by side and 24 for 4;
// 2-4 tokens: 1 row as fast or faster than 2), so each thread streams one row.
template <int T, int P>
[[gnu::always_inline]] inline void dot_row(const Decoder& dec, const uint8_t* codes, const uint8_t* scales,
                                           int64_t k, const int16_t* q0, const float* sa0, int64_t k64,
                                           float* out /* [T] */) {
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const int64_t full = k / kChunk, chunks = k64 / kChunk;
  // Token t's chunk c: q at q0 + t * qt + c * kChunk * P, factors at sa0 + t * st + c * 8
  // (unsigned strides: a signed (t * k64 + c * 64) / 8 cost a cmov and two shifts per token).
  const size_t qt = static_cast<size_t>(k64) * P, st = static_cast<size_t>(k64) / 8;
  auto step = [&](int64_t c, const __m256i* w, __m256 sw) {
    const int16_t* qc = q0 + static_cast<size_t>(c) * (kChunk * P);
    const float* sc = sa0 + static_cast<size_t>(c) * (kChunk / 8);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) acc[t] = chunk_step<P>(w, sw, qc + t * qt, sc + t * st, acc[t]);
  };
  int64_t c = 0;
  for (; c + 2 <= full; c += 2) {  // two chunks per iteration: their 8 scale bytes converted at once
    rows_prefetch(codes, scales, c);
    __m256i w[4];
    __m256 s0, s1;
    rows_scales2(scales + c * 4, s0, s1);
    dec.weights(codes + c * 32, w);
    step(c, w, s0);
    dec.weights(codes + (c + 1) * 32, w);
    step(c + 1, w, s1);
  }
  for (; c < chunks; ++c) {
    __m256i w[4];
    uint32_t sbytes = 0;
    if (c < full) {
      dec.weights(codes + c * 32, w);
      std::memcpy(&sbytes, scales + c * 4, 4);
    } else {  // 16, 32 or 48 elements left: codes and scales zero-padded (q and sa are too)
      alignas(32) uint8_t tail[32] = {};
      const int64_t rem = k - c * kChunk;
      std::memcpy(tail, codes + c * 32, static_cast<size_t>(rem / 2));
      std::memcpy(&sbytes, scales + c * 4, static_cast<size_t>(rem / 16));
      dec.weights(tail, w);
    }
    step(c, w, dec.scales(sbytes));
  }
  for (int t = 0; t < T; ++t) out[t] = rows_hsum(acc[t]);
}

// y[t, r] for rows [b0, b1) and the T tokens from t0: the rows loop here, so that a row costs
// no call and its epilogue overlaps the next row's loop (at k = 2048 a row is only 16 iterations).
template <int T, int P>
void dot_rows(const Decoder& dec, const W4a16Rows& a, int64_t b0, int64_t b1, int64_t t0, void* y, DType act) {
  const int16_t* q = a.q + t0 * a.k64 * P;
  const float* sa = a.sa + t0 * a.k64 / 8;
  for (int64_t r = b0; r < b1; ++r) {
    float out[T];
    dot_row<T, P>(dec, a.codes[r], a.scales[r], a.k, q, sa, a.k64, out);
    const float g = a.global[r], bias = a.bias ? a.bias[r] : 0.0f;
    for (int t = 0; t < T; ++t) rows_store(y, act, (t0 + t) * a.n + r, out[t] * g + bias);
  }
}

using RowsFn = void (*)(const Decoder&, const W4a16Rows&, int64_t, int64_t, int64_t, void*, DType);
// [pieces - 1][tokens]. Token tiles of 4 (4 accumulators, 4 weight vectors, the scales): 8 tokens
// in one tile spilled registers and measured slower (46 vs 58 G multiply-adds/s per core at m = 8;
// and on a Zen 3, docs/KERNELS.md "Known gaps").
constexpr RowsFn kRows[2][kTokTile + 1] = {
    {nullptr, dot_rows<1, 1>, dot_rows<2, 1>, dot_rows<3, 1>, dot_rows<4, 1>},
    {nullptr, dot_rows<1, 2>, dot_rows<2, 2>, dot_rows<3, 2>, dot_rows<4, 2>}};

// y[t, r] for rows [r0, r1) and every token of `a`, on the calling thread.
void w4a16_rows(const W4a16Rows& a, int64_t r0, int64_t r1, void* y, DType act) {
  const Decoder dec;
  rows_by_tiles<kRowBlock, kTokTile>(r0, r1, a.m, [&](int64_t b0, int64_t b1, int64_t t0, int tt) {
    kRows[a.pieces - 1][tt](dec, a, b0, b1, t0, y, act);
  });
}

}  // namespace

}  // namespace fp4lm::kernels::cpu

#undef FP4LM_DPWSSD
