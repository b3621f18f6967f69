// FP8 (E4M3) W8A16 GEMM/GEMV on AVX2/F16C: the Marlin-FP8 semantics — weights decoded exactly,
// activations never quantized, fp32 accumulation.
//
// Decoding: every E4M3 value divided by 256 is exactly an fp16 value with the same exponent and
// mantissa bits (fp16 has one more exponent bit, bias 15 instead of 7, and covers E4M3's
// subnormals as its own). Unpacking a byte into the top of a 16-bit word, an arithmetic shift
// right by one and clearing bit 14 give that fp16; vcvtph2ps widens it to fp32 (exactly,
// subnormals included). The 256 is folded into the row scale. Elements stay in natural order.
//
// Register schedule (m < kFp8PanelMinTokens): M=1 runs 4 rows at once (4 FMA chains, each weight
// byte read once: the GEMV streams at memory bandwidth); more tokens run 3 rows × 2 tokens or
// 2 rows × 3-4 tokens per tile. Panel schedule: rows decoded once to fp32, 3 rows × 4 tokens per
// tile (12 accumulators + 3 weight + 1 x registers: 12 FMAs per 7 loads). Schedules:
// fp8_w8a16_schedule.h.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/fp8_w8a16_schedule.h"
#include "kernels/cpu/avx2/common.h"

namespace fp4lm::kernels::cpu {

namespace {

// 16 code bytes -> elements 0..7 (lo) and 8..15 (hi), each the E4M3 value / 256 in fp32.
inline void decode16(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i z = _mm_setzero_si128(), clear14 = _mm_set1_epi16(static_cast<short>(0xBFFF));
  const __m128i w0 = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(z, b), 1), clear14);
  const __m128i w1 = _mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(z, b), 1), clear14);
  lo = _mm256_cvtph_ps(w0);
  hi = _mm256_cvtph_ps(w1);
}

// Calls step(j, codes of elements [j, j + 16)) over a row, the last chunk zero-padded.
template <class Step>
inline void each_chunk16(const uint8_t* row, int64_t k, Step&& step) {
  const int64_t full = k / 16 * 16;
  for (int64_t j = 0; j < full; j += 16) step(j, row + j);
  if (full < k) {
    alignas(16) uint8_t tail[16] = {};
    std::memcpy(tail, row + full, static_cast<size_t>(k - full));
    step(full, tail);
  }
}

// out[r][t] = Σ_j x_t[j] · w_r[j] / 256 for R rows and T tokens (xp stride kp, zero-padded).
// Per 16-element chunk, each (row, token) accumulator takes two FMAs in the same order for every
// (R, T) and in the panel tile, so a row's result never depends on the tile it is computed in.
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

struct Avx2 {
  using X = float;
  using Panel = float;
  static constexpr int kChunk = 16;
  static constexpr int kTokTile = 4;
  static constexpr int kRowsFor[kTokTile + 1] = {0, 4, 3, 2, 2};
  using Tile = void (*)(const uint8_t* const*, int64_t, const float*, int64_t, float*);
  static constexpr Tile kWide[kTokTile + 1] = {nullptr, tile<4, 1>, tile<3, 2>, tile<2, 3>, tile<2, 4>};
  static constexpr Tile kOne[kTokTile + 1] = {nullptr, tile<1, 1>, tile<1, 2>, tile<1, 3>, tile<1, 4>};

  static void decode_row(const uint8_t* codes, int64_t k, float* out) {
    each_chunk16(codes, k, [&](int64_t j, const uint8_t* p) {
      __m256 lo, hi;
      decode16(p, lo, hi);
      _mm256_storeu_ps(out + j, lo);
      _mm256_storeu_ps(out + j + 8, hi);
    });
  }

  static constexpr int64_t kPanelMinTokens = 8;  // measured: from 8 tokens the panel is faster
  static constexpr int kPanelR = 3, kPanelT = 4;
  using PanelTile = void (*)(const float*, int64_t, const float*, int64_t, float*);
  static constexpr PanelTile kPanelWide[kPanelT + 1] = {nullptr, panel_tile<3, 1>, panel_tile<3, 2>,
                                                        panel_tile<3, 3>, panel_tile<3, 4>};
  static constexpr PanelTile kPanelOne[kPanelT + 1] = {nullptr, panel_tile<1, 1>, panel_tile<1, 2>,
                                                       panel_tile<1, 3>, panel_tile<1, 4>};

  static void store(void* y, DType act, int64_t i, float v) { avx2::store_act(y, act, i, v); }
};
static_assert(kFp8RowBlock % 4 == 0 && kFp8RowBlock % 3 == 0);

}  // namespace

int64_t fp8_w8a16_row_block_avx2(int64_t m, int64_t k) { return fp8_row_block<Avx2>(m, k); }

void fp8_w8a16_rows_avx2(const Fp8Rows& w, const float* x, int64_t kp, int64_t m, int64_t r0, int64_t r1, void* y,
                         DType act) {
  fp8_rows<Avx2>(w, x, kp, m, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
