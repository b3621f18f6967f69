// The AVX-512 attention variant (F, BW, VL only: no BF16 / VBMI instructions, so it runs on any
// AVX-512 CPU): 16 fp32 lanes, cached rows converted in registers — bf16 by a widening shift,
// f16 by vcvtph2ps, FP8 E4M3 through f16 (code / 256 exactly) times scale × 256. Schedule: attention_schedule.h.
//
// The file is compiled with the project's AVX-512 flags (VBMI, VNNI, BF16 included) but its
// intrinsics are F/BW/VL only, and the variant requires only those (+ AVX2/FMA/F16C) at run time.
// Checked on the GCC 12 object: no vpermb / vpermi2b / vpermt2b / vpdpbusd / vdpbf16ps /
// vcvtne2ps2bf16 (`objdump -d ... | grep -E 'vperm[it]?2?b|vpdpbus|bf16'` is empty). A
// `#pragma GCC target("no-avx512vbmi,...")` cannot enforce it: the intrinsics then fail to inline.
#include <immintrin.h>

#include "kernels/cpu/attention_schedule.h"

// GCC 12 reports the intrinsics' _mm512_undefined_epi32() pass-through as maybe-uninitialized
// (a false positive, as in common.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace fp4lm::kernels::cpu {

namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int W = 16;
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V loadu(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
  // Fixed tree: 256-bit halves, 128-bit halves, then within the 128-bit lane.
  static float hsum(V v) {
    const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v),
                                   _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
  }
  // The lane sums of 8 vectors at once (out[j] = Σ lanes of a[j]), by one transposing tree that
  // pairs every vector's lanes the same way: lane i + i+8, then those + (i+4), then the
  // remaining 4 as (0 + 2) + (1 + 3). 26 operations instead of 8 separate trees.
  static void hsum8(const V* a, float* out) {
    V b[4];
    for (int k = 0; k < 4; ++k)
      b[k] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0x44),
                           _mm512_shuffle_f32x4(a[2 * k], a[2 * k + 1], 0xEE));
    V c[2];
    for (int k = 0; k < 2; ++k)
      c[k] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0x88),
                           _mm512_shuffle_f32x4(b[2 * k], b[2 * k + 1], 0xDD));
    // Quarter k of c[0] holds 4 partial sums of vector k, of c[1] of vector k + 4.
    const V d = _mm512_add_ps(_mm512_shuffle_ps(c[0], c[1], 0x44), _mm512_shuffle_ps(c[0], c[1], 0xEE));
    const V e = _mm512_add_ps(_mm512_shuffle_ps(d, d, 0x88), _mm512_shuffle_ps(d, d, 0xDD));
    // Quarter k: [sum k, sum k + 4, sum k, sum k + 4].
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm256_storeu_ps(out, _mm512_castps512_ps256(_mm512_permutexvar_ps(order, e)));
  }
  // exp(x) for x <= 0: 2^n · p(r), n = round(x · log2 e), r = x − n ln 2 (two-part ln 2), p the
  // degree-7 Taylor polynomial (|r| <= 0.35: truncation < 1e-8 relative); 0 below -87.3 (and
  // for −inf), where 2^n would leave the normal range.
  static V exp_nonpos(V x) {
    const __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
    const V n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    V p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mul_ps(live, p, _mm512_castsi512_ps(e));
  }
  template <DType DT>
  static V load(const uint8_t* row, int64_t d, [[maybe_unused]] V scale256) {
    if constexpr (DT == DType::F32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + d);
    } else if constexpr (DT == DType::BF16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d));
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    } else if constexpr (DT == DType::F16) {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + 2 * d)));
    } else {
      // E4M3 byte in the top of a word, shifted right one (sign copied), bit 14 cleared: the
      // binary16 of code / 256 (same exponent field, bias 15 vs 7; subnormals map to subnormals).
      __m256i w = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + d)));
      w = _mm256_and_si256(_mm256_srai_epi16(_mm256_slli_epi16(w, 8), 1), _mm256_set1_epi16(-16385));
      return _mm512_mul_ps(_mm512_cvtph_ps(w), scale256);
    }
  }
};

}  // namespace

void attention_avx512(const AttentionCall& c, float* scratch) { attention_schedule::run<Avx512>(c, scratch); }

}  // namespace fp4lm::kernels::cpu
