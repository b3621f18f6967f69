#pragma once
// The AVX2 W4A4 row loop (docs/KERNELS.md, "W4A4 inner loop"), compiled once per instruction set
// by the file that includes it, after defining FP4LM_W4A4_DOT:
//   0  avx2/nvfp4_w4a4.cpp: vpmaddubsw pair sums, vpaddw, vpmaddwd with ones, the correction;
//   1  avxvnni/nvfp4_w4a4.cpp: two vpdpbusd from the correction (AVX-VNNI, VEX: Intel client CPUs);
//   2  avx512/nvfp4_w4a4_vnni_twin.cpp: the same with EVEX vpdpbusd (AVX512-VNNI + VL), the
//      AVX-VNNI variant's test twin on CPUs that have AVX-512 but not AVX-VNNI.
// The int32 sums are exact in all three (|pair sum| <= 576, so vpmaddubsw never saturates;
// |sum| of 8 products <= 2304), so they give the same bits. Internal linkage only, and no
// inline function of another header is called (see avx2/nvfp4_w4a16_rows.h).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/avx2/nvfp4.h"
#include "kernels/cpu/avx2/rows_local.h"

#ifndef FP4LM_W4A4_DOT
#error "define FP4LM_W4A4_DOT (0, 1 or 2) before including nvfp4_w4a4_rows.h"
#elif FP4LM_W4A4_DOT == 1
#define FP4LM_DPBUSD _mm256_dpbusd_avx_epi32
#elif FP4LM_W4A4_DOT == 2
#define FP4LM_DPBUSD _mm256_dpbusd_epi32
#endif

namespace fp4lm::kernels::cpu {

namespace w4a4_rows_impl {
namespace {

constexpr int64_t kRowBlock = kNvfp4RowBlock;
constexpr int kTokTile = 4;

struct Decoder {
  __m256i low4 = _mm256_set1_epi8(0x0f);
  // 2 × E2M1 + 12 as uint8 (0..24), indexed by the 4-bit code (bit 3 = sign): unsigned, so it is
  // vpmaddubsw's unsigned operand as it is; the 12 × Σ 2a it adds per lane is taken off by the
  // activation's stored correction (W4a4Input::corr).
  __m256i lut = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0));
#if FP4LM_W4A4_DOT == 0
  __m256i ones = _mm256_set1_epi16(1);  // vpmaddwd's pair sums of the 16-bit products
#endif
};

// Token t's chunk: 8 int32 lanes, lane d = Σ over elements 8d..8d+7 of (2w + 12) × 2a, minus
// the stored 12 × Σ 2a (corr is its negation, so it starts the sum) = Σ 2w × 2a, exact
// (|pair sum| <= 576, so vpmaddubsw never saturates).
inline __m256i chunk_sum(const Decoder& d, __m256i ulo, __m256i uhi, const int8_t* q, const int16_t* corr) {
  const __m256i alo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i ahi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32));
  const __m256i c = _mm256_cvtepi16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(corr)));
#if FP4LM_W4A4_DOT == 0
  const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(ulo, alo), _mm256_maddubs_epi16(uhi, ahi));
  return _mm256_add_epi32(_mm256_madd_epi16(p16, d.ones), c);
#else
  (void)d;
  return FP4LM_DPBUSD(FP4LM_DPBUSD(c, ulo, alo), uhi, ahi);
#endif
}

// out[t] = Σ over blocks of (integer block dot) × scale_a × scale_w × 2^-8, for T tokens; two
// chunks per iteration (their 8 scale bytes converted at once), each decoded once for the T.
template <int T>
[[gnu::always_inline]] inline void dot_row(const Decoder& d, const uint8_t* codes, const uint8_t* sc,
                                           int64_t k, const W4a4Rows& qa, int64_t t0, float* out) {
  const int64_t k64 = qa.k64, chunks = k64 / 64, full = k / 64;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  const size_t qt = static_cast<size_t>(k64), st = static_cast<size_t>(chunks) * 8;
  const int8_t* q0 = qa.q + static_cast<size_t>(t0) * qt;
  const float* sa0 = qa.sa + static_cast<size_t>(t0) * st;
  const int16_t* corr0 = qa.corr + static_cast<size_t>(t0) * st;
  auto step = [&](int64_t c, __m256i cv, __m256 sw) {
    const __m256i ulo = _mm256_shuffle_epi8(d.lut, _mm256_and_si256(cv, d.low4));
    const __m256i uhi = _mm256_shuffle_epi8(d.lut, _mm256_and_si256(_mm256_srli_epi16(cv, 4), d.low4));
    const int8_t* qc = q0 + static_cast<size_t>(c) * 64;
    const float* sc8 = sa0 + static_cast<size_t>(c) * 8;
    const int16_t* cc = corr0 + static_cast<size_t>(c) * 8;
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const __m256 s = _mm256_mul_ps(sw, _mm256_loadu_ps(sc8 + t * st));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(chunk_sum(d, ulo, uhi, qc + t * qt, cc + t * st)), s, acc[t]);
    }
  };
  int64_t c = 0;
  for (; c + 2 <= full; c += 2) {
    rows_prefetch(codes, sc, c);
    __m256 s0, s1;
    rows_scales2(sc + c * 4, s0, s1);  // scale × 2^-8: the epilogue multiplies by 2^8 back
    step(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + c * 32)), s0);
    step(c + 1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + (c + 1) * 32)), s1);
  }
  for (; c < chunks; ++c) {  // the last odd chunk, or 16, 32 or 48 elements left
    alignas(32) uint8_t tail[32] = {};
    alignas(8) uint8_t sbytes[8] = {};
    const int64_t rem = c < full ? 64 : k - c * 64;  // zero-padded (activations are padded too)
    std::memcpy(tail, codes + c * 32, static_cast<size_t>(rem / 2));
    std::memcpy(sbytes, sc + c * 4, static_cast<size_t>(rem / 16));
    __m256 s0, s1;
    rows_scales2(sbytes, s0, s1);
    step(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(tail)), s0);
  }
  for (int t = 0; t < T; ++t) out[t] = rows_hsum(acc[t]);
}

// y[t, r] for rows [b0, b1) and the T tokens from t0: the rows loop here, so that a row costs
// no call and its epilogue overlaps the next row's loop (at k = 2048 a row is only 16 iterations).
template <int T>
void dot_rows(const Decoder& d, const W4a4Rows& a, int64_t b0, int64_t b1, int64_t t0, void* y, DType act) {
  for (int64_t r = b0; r < b1; ++r) {
    float out[T];
    dot_row<T>(d, a.codes[r], a.scales[r], a.k, a, t0, out);
    // 64 = 2^8 (the decoded weight scales' 2^-8) / 4 (both operands were doubled). alpha = the
    // token's input_scale × the row's weight_scale_2 (the same product for every token under a
    // static scale).
    const float bias = a.bias ? a.bias[r] : 0.0f;
    for (int t = 0; t < T; ++t) {
      const float alpha = a.token_scale[t0 + t] * a.global[r] * 64.0f;
      rows_store(y, act, (t0 + t) * a.n + r, out[t] * alpha + bias);
    }
  }
}

using RowsFn = void (*)(const Decoder&, const W4a4Rows&, int64_t, int64_t, int64_t, void*, DType);
constexpr RowsFn kRows[kTokTile + 1] = {nullptr, dot_rows<1>, dot_rows<2>, dot_rows<3>, dot_rows<4>};

}  // namespace
}  // namespace w4a4_rows_impl

namespace {

// y[t, r] for rows [r0, r1) and every token of `a`, on the calling thread.
void w4a4_rows(const W4a4Rows& a, int64_t r0, int64_t r1, void* y, DType act) {
  using namespace w4a4_rows_impl;
  const Decoder dec;
  rows_by_tiles<kRowBlock, kTokTile>(r0, r1, a.m, [&](int64_t b0, int64_t b1, int64_t t0, int tt) {
    kRows[tt](dec, a, b0, b1, t0, y, act);
  });
}

}  // namespace

}  // namespace fp4lm::kernels::cpu

#undef FP4LM_DPBUSD
