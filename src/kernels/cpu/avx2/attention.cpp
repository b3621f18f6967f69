// The AVX2 + FMA + F16C attention variant: 8 fp32 lanes, cached rows converted in registers —
// bf16 by a widening shift, f16 by vcvtph2ps, FP8 E4M3 through f16 (code / 256 exactly) times
// scale × 256.
// Schedule: attention_schedule.h.
#include <immintrin.h>

#include "kernels/cpu/attention_schedule.h"

namespace fp4lm::kernels::cpu {

namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int W = 8;
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V loadu(const float* p) { return _mm256_loadu_ps(p); }
  static void storeu(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static void prefetch_l2(const void* p) { _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T1); }
  // Fixed tree: 128-bit halves, then within the 128-bit lane.
  static float hsum(V v) {
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
  }
  // The lane sums of 8 vectors at once (out[j] = Σ lanes of a[j]), by one transposing tree that
  // pairs every vector's lanes the same way: lane i + i+4, then (0 + 2) + (1 + 3).
  static void hsum8(const V* a, float* out) {
    V b[4];
    for (int k = 0; k < 4; ++k)
      b[k] = _mm256_add_ps(_mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x20),
                           _mm256_permute2f128_ps(a[2 * k], a[2 * k + 1], 0x31));
    V c[2];
    for (int k = 0; k < 2; ++k)
      c[k] = _mm256_add_ps(_mm256_shuffle_ps(b[2 * k], b[2 * k + 1], 0x44),
                           _mm256_shuffle_ps(b[2 * k], b[2 * k + 1], 0xEE));
    const V e = _mm256_add_ps(_mm256_shuffle_ps(c[0], c[1], 0x88), _mm256_shuffle_ps(c[0], c[1], 0xDD));
    // e = [s0, s2, s4, s6 | s1, s3, s5, s7]
    _mm256_storeu_ps(out, _mm256_permutevar8x32_ps(e, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
  }
  // exp(x) for x <= 0, as the AVX-512 variant: 2^n · (degree-7 Taylor polynomial of r),
  // r = x − n ln 2; 0 below -87.3 and for −inf.
  static V exp_nonpos(V x) {
    const V live = _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.3f));
    const V n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    V r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    V p = _mm256_set1_ps(1.0f / 5040.0f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_and_ps(live, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
  }
  template <DType DT>
  static V load(const uint8_t* row, int64_t d, [[maybe_unused]] V scale256) {
    if constexpr (DT == DType::F32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + d);
    } else if constexpr (DT == DType::BF16) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * d));
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else if constexpr (DT == DType::F16) {
      return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row + 2 * d)));
    } else {
      // As the AVX-512 variant: the E4M3 byte becomes the binary16 of code / 256.
      __m128i w = _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(row + d)));
      w = _mm_and_si128(_mm_srai_epi16(_mm_slli_epi16(w, 8), 1), _mm_set1_epi16(-16385));
      return _mm256_mul_ps(_mm256_cvtph_ps(w), scale256);
    }
  }
};

}  // namespace

void attention_avx2(const AttentionCall& c, float* scratch) { attention_schedule::run<Avx2>(c, scratch); }

}  // namespace fp4lm::kernels::cpu
