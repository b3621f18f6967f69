#pragma once
// The AVX2 W4A4 row loop (docs/KERNELS.md, "W4A4 inner loop"), compiled once per instruction set
// by the file that includes it, after defining FP4LM_W4A4_DOT:
//   0  avx2/nvfp4_w4a4.cpp: vpmaddubsw pair sums, vpaddw, vpmaddwd with ones;
//   1  avxvnni/nvfp4_w4a4.cpp: two vpdpbusd (AVX-VNNI, VEX: Intel client CPUs);
//   2  avx512/nvfp4_w4a4_vnni_twin.cpp: the same with EVEX vpdpbusd (AVX512-VNNI + VL), the
//      AVX-VNNI variant's test twin on CPUs that have AVX-512 but not AVX-VNNI.
// The int32 sums are exact in all three (|pair sum| <= 288, so vpmaddubsw never saturates;
// |sum| of 8 products <= 1152), so they give the same bits. Internal linkage only, and no
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
  // 2 × E2M1 as int8, indexed by the 4-bit code (bit 3 = sign).
  __m256i lut = _mm256_broadcastsi128_si256(
      _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12));
  __m128i dup = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, -1, -1, -1, -1, -1, -1, -1, -1);
#if FP4LM_W4A4_DOT == 0
  __m256i ones = _mm256_set1_epi16(1);  // vpmaddwd's pair sums of the 16-bit products
#endif
  __m256i m7f = _mm256_set1_epi32(0x7f), m80 = _mm256_set1_epi32(0x80);
  __m256 two120 = _mm256_set1_ps(0x1p120f);

  // 4 E4M3 bytes -> lanes [s0, s0, s1, s1, s2, s2, s3, s3] as fp32. Shifting the 7 magnitude
  // bits to fp32's exponent/mantissa position and multiplying by 2^120 rebases the exponent
  // bias 7 -> 127, exactly, subnormals included. (NaN bytes are rejected at load.)
  inline __m256 scales(uint32_t bytes) const {
    const __m256i v = _mm256_cvtepu8_epi32(_mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(bytes)), dup));
    const __m256i bits = _mm256_or_si256(_mm256_slli_epi32(_mm256_and_si256(v, m7f), 20),
                                         _mm256_slli_epi32(_mm256_and_si256(v, m80), 24));
    return _mm256_mul_ps(_mm256_castsi256_ps(bits), two120);
  }
};

// out[t] = Σ over blocks of (integer block dot) × scale_a × scale_w, for T tokens.
template <int T>
void dot_row(const Decoder& d, const uint8_t* codes, const uint8_t* sc, int64_t k,
             const W4a4Rows& qa, int64_t t0, float* out) {
  const int64_t k64 = qa.k64, chunks = k64 / 64, full = k / 64;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    __m256i cv;
    uint32_t sbytes = 0;
    if (c < full) {
      rows_prefetch(codes, sc, c);
      cv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + c * 32));
      std::memcpy(&sbytes, sc + c * 4, 4);
    } else {  // 16, 32 or 48 elements left: zero-pad codes and scales (activations are padded)
      alignas(32) uint8_t tail[32] = {};
      const int64_t rem = k - c * 64;
      std::memcpy(tail, codes + c * 32, rem / 2);
      std::memcpy(&sbytes, sc + c * 4, rem / 16);
      cv = _mm256_load_si256(reinterpret_cast<const __m256i*>(tail));
    }
    const __m256i wlo = _mm256_shuffle_epi8(d.lut, _mm256_and_si256(cv, d.low4));
    const __m256i whi = _mm256_shuffle_epi8(d.lut, _mm256_and_si256(_mm256_srli_epi16(cv, 4), d.low4));
    const __m256i ulo = _mm256_abs_epi8(wlo), uhi = _mm256_abs_epi8(whi);
    const __m256 sw = d.scales(sbytes);
    for (int t = 0; t < T; ++t) {
      const size_t base = static_cast<size_t>((t0 + t) * k64 + c * 64);
      const __m256i alo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa.q + base));
      const __m256i ahi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qa.q + base + 32));
#if FP4LM_W4A4_DOT == 0
      const __m256i p16 = _mm256_add_epi16(_mm256_maddubs_epi16(ulo, _mm256_sign_epi8(alo, wlo)),
                                           _mm256_maddubs_epi16(uhi, _mm256_sign_epi8(ahi, whi)));
      const __m256i p32 = _mm256_madd_epi16(p16, d.ones);
#else
      const __m256i p32 = FP4LM_DPBUSD(FP4LM_DPBUSD(_mm256_setzero_si256(), ulo, _mm256_sign_epi8(alo, wlo)), uhi,
                                       _mm256_sign_epi8(ahi, whi));
#endif
      const __m256 s = _mm256_mul_ps(sw, _mm256_loadu_ps(qa.sa + ((t0 + t) * chunks + c) * 8));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p32), s, acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) out[t] = rows_hsum(acc[t]);
}

using DotFn = void (*)(const Decoder&, const uint8_t*, const uint8_t*, int64_t,
                       const W4a4Rows&, int64_t, float*);
constexpr DotFn kDot[kTokTile + 1] = {nullptr, dot_row<1>, dot_row<2>, dot_row<3>, dot_row<4>};

}  // namespace
}  // namespace w4a4_rows_impl

namespace {

// y[t, r] for rows [r0, r1) and every token of `a`, on the calling thread.
void w4a4_rows(const W4a4Rows& a, int64_t r0, int64_t r1, void* y, DType act) {
  using namespace w4a4_rows_impl;
  const Decoder dec;
  float out[kTokTile];
  rows_by_tiles<kRowBlock, kTokTile>(r0, r1, a.m, [&](int64_t r, int64_t t0, int tt) {
    kDot[tt](dec, a.codes[r], a.scales[r], a.k, a, t0, out);
    // 0.25: both operands were doubled. alpha = the token's input_scale × the row's
    // weight_scale_2 (the same product for every token under a static scale).
    const float bias = a.bias ? a.bias[r] : 0.0f;
    for (int t = 0; t < tt; ++t) {
      const float alpha = a.token_scale[t0 + t] * a.global[r] * 0.25f;
      rows_store(y, act, (t0 + t) * a.n + r, out[t] * alpha + bias);
    }
  });
}

}  // namespace

}  // namespace fp4lm::kernels::cpu

#undef FP4LM_DPBUSD
