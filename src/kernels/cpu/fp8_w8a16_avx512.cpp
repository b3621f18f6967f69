// FP8 (E4M3) W8A16 GEMM/GEMV on AVX-512 (F, BW): the AVX2 kernel's decode (fp16 route, exact,
// docs in fp8_w8a16_avx2.cpp) on 32 elements per step — vpmovzxbw widens 32 code bytes to words,
// two shifts and a mask make fp16, vcvtph2ps widens each half to 16 fp32 lanes. Per 32-element
// chunk each (row, token) accumulator takes two 16-lane FMAs, then one fixed reduction: results
// are independent of tile, row range, thread count and batch (not bit-equal to the AVX2 kernel,
// which sums in 8 lanes). Built only with the AVX-512 flags (CMake), called only through
// fp8_kernels_avx512() when the CPU has AVX-512 F, BW and VL.
// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(), which
// -Wuninitialized reports at every inlined use (as in nvfp4_common_avx512.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/fp8_kernels.h"


namespace fp4lm::kernels::cpu {

namespace {

constexpr int kTokTile = 4;

// 32 code bytes -> elements 0..15 (lo) and 16..31 (hi), each the E4M3 value / 256 in fp32.
inline void decode32(const uint8_t* p, __m512& lo, __m512& hi) {
  const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i h = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(w, 8), 1),
                                     _mm512_set1_epi16(static_cast<short>(0xBFFF)));
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
}

// Fixed-order horizontal sum of 16 lanes.
inline float hsum16(__m512 v) {
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <int R, int T>
void tile(const uint8_t* const* rows, int64_t k, const float* xp, int64_t kp, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  auto step = [&](int r, const uint8_t* p, int64_t j) {
    __m512 lo, hi;
    decode32(p, lo, hi);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const float* xt = xp + t * kp + j;
      acc[r][t] = _mm512_fmadd_ps(lo, _mm512_loadu_ps(xt), acc[r][t]);
      acc[r][t] = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xt + 16), acc[r][t]);
    }
  };
  const int64_t full = k / 32 * 32;
  for (int64_t j = 0; j < full; j += 32) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) step(r, rows[r] + j, j);
  }
  if (full < k) {  // the zero-padded last chunk (x is padded to 32 too)
    for (int r = 0; r < R; ++r) {
      alignas(32) uint8_t tail[32] = {};
      std::memcpy(tail, rows[r] + full, static_cast<size_t>(k - full));
      step(r, tail, full);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum16(acc[r][t]);
}

using TileFn = void (*)(const uint8_t* const*, int64_t, const float*, int64_t, float*);
constexpr TileFn kWide[kTokTile + 1] = {nullptr, tile<4, 1>, tile<4, 2>, tile<4, 3>, tile<4, 4>};
constexpr TileFn kOne[kTokTile + 1] = {nullptr, tile<1, 1>, tile<1, 2>, tile<1, 3>, tile<1, 4>};
constexpr int kRows = 4;
static_assert(kFp8RowBlock % kRows == 0);

inline void store(void* y, DType t, int64_t i, float v) {
  switch (t) {
    case DType::F32: static_cast<float*>(y)[i] = v; return;
    case DType::BF16: static_cast<uint16_t*>(y)[i] = f32_to_bf16(v); return;
    default: static_cast<uint16_t*>(y)[i] = static_cast<uint16_t>(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT)); return;
  }
}

}  // namespace

void fp8_w8a16_rows_avx512(const Fp8Matrix& w, const Fp8Input& in, int64_t r0, int64_t r1, void* y, DType act) {
  const int64_t n = w.n, k = w.k, kp = in.kp, m = in.m;
  float out[kRows * kTokTile];
  for (int64_t b0 = r0; b0 < r1; b0 += kFp8RowBlock) {
    const int64_t b1 = std::min(r1, b0 + kFp8RowBlock);
    for (int64_t t0 = 0; t0 < m; t0 += kTokTile) {
      const int tt = static_cast<int>(std::min<int64_t>(kTokTile, m - t0));
      for (int64_t r = b0; r < b1;) {
        const int rr = r + kRows <= b1 ? kRows : 1;
        (rr > 1 ? kWide[tt] : kOne[tt])(w.row_codes.data() + r, k, in.x.data() + t0 * kp, kp, out);
        for (int i = 0; i < rr; ++i, ++r) {
          const float s = w.row_scale256[r], bias = w.bias.empty() ? 0.0f : w.bias[r];
          for (int t = 0; t < tt; ++t) store(y, act, (t0 + t) * n + r, out[i * tt + t] * s + bias);
        }
      }
    }
  }
}

}  // namespace fp4lm::kernels::cpu

