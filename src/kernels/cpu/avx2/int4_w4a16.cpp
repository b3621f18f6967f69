// int4 W4A16 GEMM/GEMV on AVX2 + FMA (docs/KERNELS.md, "int4 W4A16"): 16 weights per step from 8
// code bytes (nibbles split and interleaved into element order, widened to int32, converted, minus
// the zero point), one FMA per 8 columns per token into the (row, group)'s partial, then the
// group's scale. Schedules: int4_w4a16_schedule.h. Built with the AVX2 flags only.
#include <immintrin.h>

#include "kernels/cpu/avx2/common.h"
#include "kernels/cpu/int4_w4a16_schedule.h"

namespace fp4lm::kernels::cpu {
namespace {

struct Avx2 {
  using V = __m256;
  static constexpr int kLanes = 8, kVecs = 2;
  static constexpr int64_t kPanelMinTokens = 8;
  // 16 ymm registers: 2 rows at M = 1; from 2 tokens one row's 2 partials and accumulator per token fill them.
  static constexpr int kRowsFor(int tokens) { return tokens == 1 ? 2 : 1; }
  static V zero() { return _mm256_setzero_ps(); }
  static V set1(float f) { return _mm256_set1_ps(f); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void storev(float* p, V v) { _mm256_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm256_add_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static float hsum(V v) { return avx2::hsum(v); }
  static void decode16(const uint8_t* p, V z, V* out) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i e = _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
    out[0] = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(e)), z);
    out[1] = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(e, 8))), z);
  }
  static void store(void* y, DType act, int64_t i, float v) { avx2::store_act(y, act, i, v); }
};

}  // namespace

int64_t int4_w4a16_row_block_avx2(int64_t m, int64_t k) { return int4_row_block<Avx2>(m, k); }
void int4_w4a16_rows_avx2(const Int4Rows& w, const float* x, int64_t m, int64_t r0, int64_t r1, void* y,
                          DType act) {
  int4_rows<Avx2>(w, x, m, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
