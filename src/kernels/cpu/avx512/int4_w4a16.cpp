// int4 W4A16 GEMM/GEMV on AVX-512 F (docs/KERNELS.md, "int4 W4A16"): 16 weights per step from 8
// code bytes (nibbles split and interleaved into element order, widened to int32, converted), as
// (code - zero) × scale in fp32, then one FMA per 16 columns per token into one accumulator per
// (row, token); 4 rows × 4 tokens per register tile. Groups of a multiple of 128 columns decode 128
// weights per step instead: 16 dwords of 8 nibbles, each nibble looked up (vpermps) in the (row,
// group)'s 16-entry table of (code - zero) × scale — 2 ops per 16 weights (Int4Rows::chunk128). Schedules: int4_w4a16_schedule.h. Built with
// the AVX-512 flags only, called only when the CPU has them.
#include "kernels/cpu/avx512/common.h"
#include "kernels/cpu/int4_w4a16_schedule.h"

namespace fp4lm::kernels::cpu {
namespace {

struct Avx512 {
  using V = __m512;
  static constexpr int kLanes = 16, kVecs = 1, kRows = 4, kToks = 4;
  static constexpr int64_t kPanelMinTokens = 8;
  static constexpr bool kHasChunk128 = true;
  // (code - zero) × scale for code 0..15: the same values decode16 computes.
  static V table(float z, float s) {
    const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_mul_ps(_mm512_sub_ps(iota, _mm512_set1_ps(z)), _mm512_set1_ps(s));
  }
  // 128 weights from 64 code bytes: out[t] lane L = element 8L + t (nibble t of dword L), looked up
  // by vpermps, which reads the low 4 bits of each index.
  static void decode128(const uint8_t* p, V table, V* out) {
    const __m512i d = _mm512_loadu_si512(p);
    for (int t = 0; t < 8; ++t) out[t] = _mm512_permutexvar_ps(_mm512_srli_epi32(d, 4 * t), table);
  }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void storev(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static float hsum(V v) { return avx512::hsum(v); }
  static void decode16(const uint8_t* p, V z, V s, V* out) {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i mask = _mm_set1_epi8(0x0f);
    const __m128i e = _mm_unpacklo_epi8(_mm_and_si128(b, mask), _mm_and_si128(_mm_srli_epi16(b, 4), mask));
    out[0] = _mm512_mul_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(e)), z), s);
  }
  static void store(void* y, DType act, int64_t i, float v) { avx512::store_act(y, act, i, v); }
};

}  // namespace

int64_t int4_w4a16_row_block_avx512(int64_t m, int64_t k) { return int4_row_block<Avx512>(m, k); }
void int4_w4a16_rows_avx512(const Int4Rows& w, const float* x, int64_t m, int64_t r0, int64_t r1, void* y,
                            DType act) {
  int4_rows<Avx512>(w, x, m, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
