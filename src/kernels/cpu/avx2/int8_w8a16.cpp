// int8 W8A16 GEMM/GEMV on AVX2: int8 weights widened exactly to fp32 in registers (vpmovsxbd,
// vcvtdq2ps), activations in fp32, FMAs into fp32 accumulators; the row's weight_scale is applied
// once to the sum (the epilogue of fp8_w8a16_schedule.h). The register and panel schedules are
// the FP8 W8A16 ones (avx2/fp8_w8a16.cpp) with this decoder: per 16 elements two FMAs into one
// accumulator per (row, token), in the same order in both, so results are batch-invariant.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/avx2/common.h"
#include "kernels/cpu/fp8_w8a16_schedule.h"
#include "kernels/cpu/int8_kernels.h"

namespace fp4lm::kernels::cpu {

namespace {

// 16 int8 codes -> elements 0..7 (lo) and 8..15 (hi) as fp32 (exact).
inline void decode16(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b, b)));
}

// out[r][t] = Σ_j x_t[j] · w_r[j] for R rows and T tokens (xp stride kp, zero-padded).
template <int R, int T>
void tile(const uint8_t* const* rows, int64_t k, const float* xp, int64_t kp, float* out) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  auto step = [&](int r, const uint8_t* p, int64_t j) {
    __m256 lo, hi;
    decode16(p, lo, hi);
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      const float* xt = xp + t * kp + j;
      acc[r][t] = _mm256_fmadd_ps(lo, _mm256_loadu_ps(xt), acc[r][t]);
      acc[r][t] = _mm256_fmadd_ps(hi, _mm256_loadu_ps(xt + 8), acc[r][t]);
    }
  };
  const int64_t full = k / 16 * 16;
  for (int64_t j = 0; j < full; j += 16) {
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) step(r, rows[r] + j, j);
  }
  if (full < k) {  // the zero-padded last chunk (x is padded too)
    for (int r = 0; r < R; ++r) {
      alignas(16) uint8_t tail[16] = {};
      std::memcpy(tail, rows[r] + full, static_cast<size_t>(k - full));
      step(r, tail, full);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = avx2::hsum(acc[r][t]);
}

// tile()'s accumulation with the weights from a decoded panel (row stride kc).
template <int R, int T>
void panel_tile(const float* panel, int64_t kc, const float* xp, int64_t kp, float* out) {
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t j = 0; j < kc; j += 8) {
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm256_loadu_ps(panel + r * kc + j);
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(xp + t * kp + j);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = avx2::hsum(acc[r][t]);
}

struct Int8Avx2 {
  using X = float;
  using Panel = float;
  static constexpr int kChunk = 16;
  static constexpr int kTokTile = 4;
  static constexpr int kRowsFor[kTokTile + 1] = {0, 4, 3, 2, 2};
  using Tile = void (*)(const uint8_t* const*, int64_t, const float*, int64_t, float*);
  static constexpr Tile kWide[kTokTile + 1] = {nullptr, tile<4, 1>, tile<3, 2>, tile<2, 3>, tile<2, 4>};
  static constexpr Tile kOne[kTokTile + 1] = {nullptr, tile<1, 1>, tile<1, 2>, tile<1, 3>, tile<1, 4>};

  // A row decoded to fp32, zero-padded to a multiple of 16 (what tile() decodes in registers).
  static void decode_row(const uint8_t* codes, int64_t k, float* out) {
    const int64_t full = k / 16 * 16;
    for (int64_t j = 0; j < full; j += 16) {
      __m256 lo, hi;
      decode16(codes + j, lo, hi);
      _mm256_storeu_ps(out + j, lo);
      _mm256_storeu_ps(out + j + 8, hi);
    }
    if (full < k) {
      alignas(16) uint8_t tail[16] = {};
      std::memcpy(tail, codes + full, static_cast<size_t>(k - full));
      __m256 lo, hi;
      decode16(tail, lo, hi);
      _mm256_storeu_ps(out + full, lo);
      _mm256_storeu_ps(out + full + 8, hi);
    }
  }

  static constexpr int64_t kPanelMinTokens = 8;  // as the FP8 kernel: its decode costs about the same
  static constexpr int kPanelR = 3, kPanelT = 4;
  using PanelTile = void (*)(const float*, int64_t, const float*, int64_t, float*);
  static constexpr PanelTile kPanelWide[kPanelT + 1] = {nullptr, panel_tile<3, 1>, panel_tile<3, 2>,
                                                        panel_tile<3, 3>, panel_tile<3, 4>};
  static constexpr PanelTile kPanelOne[kPanelT + 1] = {nullptr, panel_tile<1, 1>, panel_tile<1, 2>,
                                                       panel_tile<1, 3>, panel_tile<1, 4>};

  static void store(void* y, DType act, int64_t i, float v) { avx2::store_act(y, act, i, v); }
};

}  // namespace

int64_t int8_w8a16_row_block_avx2(int64_t m, int64_t k) { return fp8_row_block<Int8Avx2>(m, k); }

void int8_w8a16_rows_avx2(const Fp8Rows& w, const float* x, int64_t kp, int64_t m, int64_t r0, int64_t r1, void* y,
                          DType act) {
  fp8_rows<Int8Avx2>(w, x, kp, m, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
