// FP8 (E4M3) W8A16 GEMM/GEMV on AVX2/F16C: the Marlin-FP8 semantics — weights decoded exactly in
// registers, activations never quantized, fp32 accumulation.
//
// Decoding: every E4M3 value divided by 256 is exactly an fp16 value with the same exponent and
// mantissa bits (fp16 has one more exponent bit, bias 15 instead of 7, and covers E4M3's
// subnormals as its own). Unpacking a byte into the top of a 16-bit word, an arithmetic shift
// right by one and clearing bit 14 give that fp16; vcvtph2ps widens it to fp32 (exactly,
// subnormals included). The 256 is folded into the row scale. Elements stay in natural order.
//
// Tiles: M=1 runs 4 rows at once (4 FMA chains, each weight byte read once: the GEMV streams at
// memory bandwidth); more tokens run 3 rows × 2 tokens or 2 rows × 3-4 tokens per tile.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/fp8_kernels.h"
#include "kernels/cpu/nvfp4_common_avx2.h"

namespace fp4lm::kernels::cpu {

namespace {

using avx2::hsum;
using avx2::store_act;

constexpr int kTokTile = 4;

// 16 code bytes -> elements 0..7 (lo) and 8..15 (hi), each the E4M3 value / 256 in fp32.
inline void decode16(const uint8_t* p, __m256& lo, __m256& hi) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i z = _mm_setzero_si128(), clear14 = _mm_set1_epi16(static_cast<short>(0xBFFF));
  const __m128i w0 = _mm_and_si128(_mm_srai_epi16(_mm_unpacklo_epi8(z, b), 1), clear14);
  const __m128i w1 = _mm_and_si128(_mm_srai_epi16(_mm_unpackhi_epi8(z, b), 1), clear14);
  lo = _mm256_cvtph_ps(w0);
  hi = _mm256_cvtph_ps(w1);
}

// out[r][t] = Σ_j x_t[j] · w_r[j] / 256 for R rows and T tokens (xp stride kp, zero-padded).
// Per 16-element chunk, each (row, token) accumulator takes two FMAs in the same order for every
// (R, T), so a row's result never depends on the tile it is computed in.
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
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

using TileFn = void (*)(const uint8_t* const*, int64_t, const float*, int64_t, float*);
constexpr TileFn kWide[kTokTile + 1] = {nullptr, tile<4, 1>, tile<3, 2>, tile<2, 3>, tile<2, 4>};
constexpr TileFn kOne[kTokTile + 1] = {nullptr, tile<1, 1>, tile<1, 2>, tile<1, 3>, tile<1, 4>};
constexpr int kRows[kTokTile + 1] = {0, 4, 3, 2, 2};
static_assert(kFp8RowBlock % 4 == 0 && kFp8RowBlock % 3 == 0);

}  // namespace

void fp8_w8a16_rows_avx2(const Fp8Matrix& w, const Fp8Input& in, int64_t r0, int64_t r1, void* y, DType act) {
  const int64_t n = w.n, k = w.k, kp = in.kp, m = in.m;
  float out[4 * kTokTile];
  for (int64_t b0 = r0; b0 < r1; b0 += kFp8RowBlock) {
    const int64_t b1 = std::min(r1, b0 + kFp8RowBlock);
    for (int64_t t0 = 0; t0 < m; t0 += kTokTile) {
      const int tt = static_cast<int>(std::min<int64_t>(kTokTile, m - t0));
      for (int64_t r = b0; r < b1;) {
        const int rr = r + kRows[tt] <= b1 ? kRows[tt] : 1;
        (rr > 1 ? kWide[tt] : kOne[tt])(w.row_codes.data() + r, k, in.x.data() + t0 * kp, kp, out);
        for (int i = 0; i < rr; ++i, ++r) {
          const float s = w.row_scale256[r], bias = w.bias.empty() ? 0.0f : w.bias[r];
          for (int t = 0; t < tt; ++t) store_act(y, act, (t0 + t) * n + r, out[i * tt + t] * s + bias);
        }
      }
    }
  }
}

}  // namespace fp4lm::kernels::cpu
