// int4 W4A16 GEMM/GEMV on AVX-512 F (docs/KERNELS.md, "int4 W4A16"). With k a multiple of 128
// (Int4Rows::chunk128): 128 weights per step from 64 code bytes, each nibble looked up (vpermps) in
// the fixed table code - 8 (2 ops per 16 weights), the zero point and scale applied per lane after
// the products. Otherwise 16 weights per step (nibbles split and interleaved into element order,
// widened, converted, minus the zero point). One row at a time at M = 1, prefetched.
// Schedules: int4_w4a16_schedule.h. Built with the AVX-512 flags only, called only when the CPU has them.
#include "kernels/cpu/avx512/common.h"
#include "kernels/cpu/int4_w4a16_schedule.h"

namespace fp4lm::kernels::cpu {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16, kVecs = 1;
  static constexpr int64_t kPanelMinTokens = 8;
  static constexpr bool kHasChunk128 = true;
  static constexpr int kRowsFor(int tokens) { return tokens == 1 ? 1 : 2; }
  // 128 weights from 64 code bytes: out[t] lane L = code - 8 of column 8L + t (nibble t of dword
  // L), looked up by vpermps, which reads the low 4 bits of each index.
  static void decode128(const uint8_t* p, V* out) {
    const __m512 table = _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7);
    const __m512i d = _mm512_loadu_si512(p);
    out[0] = _mm512_permutexvar_ps(d, table);
    for (int t = 1; t < 8; ++t) out[t] = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4 * t), table);
  }
  // Lane L: zero - 8 and scale of the group holding column 8L of a chunk whose first group is
  // [base] of the scale / zero arrays (Int4Rows::chunk_groups groups in the chunk, or 1).
  static void lanes128(const Int4Rows& w, int64_t base, V& zero8, V& scale) {
    if (!w.chunk_groups) {
      zero8 = _mm512_set1_ps(w.zeros[base] - 8.0f);
      scale = _mm512_set1_ps(w.scales[base]);
      return;
    }
    const __mmask16 mask = static_cast<__mmask16>((1u << w.chunk_groups) - 1);
    const __m512i idx = _mm512_srli_epi32(
        _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120), w.lane_shift);
    const __m512 zeros = _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(mask, w.zeros + base));
    zero8 = _mm512_sub_ps(zeros, _mm512_set1_ps(8.0f));
    scale = _mm512_permutexvar_ps(idx, _mm512_maskz_loadu_ps(mask, w.scales + base));
  }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void storev(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V fnmadd(V a, V b, V c) { return _mm512_fnmadd_ps(a, b, c); }
  static float hsum(V v) { return avx512::hsum(v); }
  static void decode16(const uint8_t* p, V z, V* out) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i e = _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
    out[0] = _mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(e)), z);
  }
  static void store(void* y, DType act, int64_t i, float v) { avx512::store_act(y, act, i, v); }
};

}  // namespace

int64_t int4_w4a16_row_block_avx512(int64_t m, int64_t k) { return int4_row_block<Avx512>(m, k); }
void int4_w4a16_rows_avx512(const Int4Rows& w, const float* x, const float* xs, int64_t m, int64_t r0, int64_t r1,
                            void* y, DType act) {
  int4_rows<Avx512>(w, x, xs, m, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
