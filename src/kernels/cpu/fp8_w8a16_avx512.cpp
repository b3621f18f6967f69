// FP8 (E4M3) W8A16 GEMM/GEMV on AVX-512 (F, BW): the AVX2 kernel's decode (fp16 route, exact,
// docs in fp8_w8a16_avx2.cpp) on 32 elements per step — vpmovzxbw widens 32 code bytes to words,
// two shifts and a mask make fp16, vcvtph2ps widens each half to 16 fp32 lanes. Per 32-element
// chunk each (row, token) accumulator takes two 16-lane FMAs, then one fixed reduction: results
// are independent of tile, schedule, row range, thread count and batch (not bit-equal to the
// AVX2 kernel, which sums in 8 lanes). Register schedule: 4 rows × 1-4 tokens; panel schedule
// (fp8_w8a16_schedule.h): rows decoded once to fp32, 4 rows × 6 tokens per tile (24
// accumulators + 4 weight + 1 x of the 32 zmm registers). Built only with the AVX-512 flags
// (CMake), called only through fp8_kernels_avx512() when the CPU has AVX-512 F, BW and VL.
#include "kernels/cpu/fp8_w8a16_schedule.h"
#include "kernels/cpu/nvfp4_common_avx512.h"

namespace fp4lm::kernels::cpu {

namespace {

using avx512::hsum;

// 32 code bytes -> elements 0..15 (lo) and 16..31 (hi), each the E4M3 value / 256 in fp32.
inline void decode32(const uint8_t* p, __m512& lo, __m512& hi) {
  const __m512i w = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  const __m512i h = _mm512_and_si512(_mm512_srai_epi16(_mm512_slli_epi16(w, 8), 1),
                                     _mm512_set1_epi16(static_cast<short>(0xBFFF)));
  lo = _mm512_cvtph_ps(_mm512_castsi512_si256(h));
  hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(h, 1));
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
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

// tile()'s accumulation with the weights from a decoded panel (row stride kc).
template <int R, int T>
void panel_tile(const float* panel, int64_t kc, const float* xp, int64_t kp, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t j = 0; j < kc; j += 16) {
    __m512 w[R];
    for (int r = 0; r < R; ++r) w[r] = _mm512_loadu_ps(panel + r * kc + j);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_loadu_ps(xp + t * kp + j);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(w[r], xv, acc[r][t]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

struct Avx512 {
  static constexpr int kChunk = 32;
  static constexpr int kTokTile = 4;
  static constexpr int kRowsFor[kTokTile + 1] = {0, 4, 4, 4, 4};
  using Tile = void (*)(const uint8_t* const*, int64_t, const float*, int64_t, float*);
  static constexpr Tile kWide[kTokTile + 1] = {nullptr, tile<4, 1>, tile<4, 2>, tile<4, 3>, tile<4, 4>};
  static constexpr Tile kOne[kTokTile + 1] = {nullptr, tile<1, 1>, tile<1, 2>, tile<1, 3>, tile<1, 4>};

  static void decode_row(const uint8_t* codes, int64_t k, float* out) {
    const int64_t full = k / 32 * 32;
    __m512 lo, hi;
    for (int64_t j = 0; j < full; j += 32) {
      decode32(codes + j, lo, hi);
      _mm512_storeu_ps(out + j, lo);
      _mm512_storeu_ps(out + j + 16, hi);
    }
    if (full < k) {
      alignas(32) uint8_t tail[32] = {};
      std::memcpy(tail, codes + full, static_cast<size_t>(k - full));
      decode32(tail, lo, hi);
      _mm512_storeu_ps(out + full, lo);
      _mm512_storeu_ps(out + full + 16, hi);
    }
  }

  static constexpr int64_t kPanelMinTokens = 16;  // measured: below 16 tokens re-decoding per 4-token tile is faster
  static constexpr int kPanelR = 4, kPanelT = 6;
  using PanelTile = void (*)(const float*, int64_t, const float*, int64_t, float*);
  static constexpr PanelTile kPanelWide[kPanelT + 1] = {nullptr,          panel_tile<4, 1>, panel_tile<4, 2>,
                                                        panel_tile<4, 3>, panel_tile<4, 4>, panel_tile<4, 5>,
                                                        panel_tile<4, 6>};
  static constexpr PanelTile kPanelOne[kPanelT + 1] = {nullptr,          panel_tile<1, 1>, panel_tile<1, 2>,
                                                       panel_tile<1, 3>, panel_tile<1, 4>, panel_tile<1, 5>,
                                                       panel_tile<1, 6>};

  static void store(void* y, DType act, int64_t i, float v) { avx512::store_act(y, act, i, v); }
};
static_assert(kFp8RowBlock % 4 == 0);

}  // namespace

int64_t fp8_w8a16_row_block_avx512(int64_t m, int64_t k) { return fp8_row_block<Avx512>(m, k); }

void fp8_w8a16_rows_avx512(const Fp8Rows& w, const float* x, int64_t kp, int64_t m, int64_t r0, int64_t r1, void* y,
                           DType act) {
  fp8_rows<Avx512>(w, x, kp, m, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
