// Dense GEMM/GEMV on AVX2 for unquantized F32/BF16/F16 weights (lm_head, routers, excluded
// layers): weights read in place and widened to fp32 in registers (bf16: a 16-bit shift; f16:
// vcvtph2ps), x converted to fp32 once per call, FMA accumulation.
//
// Tiles: M=1 streams 8 rows at once (8 independent FMA chains, each weight byte read once: the
// GEMV runs at memory bandwidth); M>1 runs 3 rows × 4 tokens per tile so each loaded weight
// vector feeds 4 FMAs, over 48-row blocks that stay in L2 while all token tiles pass.
#include "kernels/cpu/avx2/dense.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels/cpu/avx2/common.h"

namespace fp4lm::kernels::cpu {

namespace {

using avx2::hsum;
using avx2::round_up;
using avx2::store_act;

constexpr int64_t kRowBlock = kDenseRowBlock;
static_assert(kRowBlock % 8 == 0 && kRowBlock % 3 == 0);
constexpr int kTokTile = 4;

template <DType W>
inline __m256 load8(const uint8_t* p) {
  if constexpr (W == DType::F32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
  } else if constexpr (W == DType::BF16) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  } else {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
}

// out[r][t] = Σ_j w_r[j] x_t[j] for R rows and T tokens (xp stride k8, zero-padded).
template <DType W, int R, int T>
void tile(const uint8_t* const* rows, int64_t k, const float* xp, int64_t k8, float* out) {
  constexpr int64_t es = W == DType::F32 ? 4 : 2;
  __m256 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm256_setzero_ps();
  const int64_t full = k / 8;
  auto step = [&](const __m256* w, int64_t c) {
    for (int t = 0; t < T; ++t) {
      const __m256 xv = _mm256_loadu_ps(xp + t * k8 + c * 8);
      for (int r = 0; r < R; ++r) acc[r][t] = _mm256_fmadd_ps(w[r], xv, acc[r][t]);
    }
  };
  for (int64_t c = 0; c < full; ++c) {
    __m256 w[R];
    for (int r = 0; r < R; ++r) w[r] = load8<W>(rows[r] + c * 8 * es);
    step(w, c);
  }
  if (const int64_t rem = k - full * 8; rem > 0) {  // zero-padded last chunk (x is padded too)
    __m256 w[R];
    for (int r = 0; r < R; ++r) {
      alignas(32) uint8_t buf[32] = {};
      std::memcpy(buf, rows[r] + full * 8 * es, static_cast<size_t>(rem * es));
      w[r] = load8<W>(buf);
    }
    step(w, full);
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

using TileFn = void (*)(const uint8_t* const*, int64_t, const float*, int64_t, float*);

struct Tiles {
  TileFn wide[kTokTile + 1];    // the many-row tile per token count
  TileFn single[kTokTile + 1];  // one row (row-block remainders)
  int rows[kTokTile + 1];
};

template <DType W>
constexpr Tiles tiles_for() {
  return {{nullptr, tile<W, 8, 1>, tile<W, 3, 2>, tile<W, 3, 3>, tile<W, 3, 4>},
          {nullptr, tile<W, 1, 1>, tile<W, 1, 2>, tile<W, 1, 3>, tile<W, 1, 4>},
          {0, 8, 3, 3, 3}};
}

const Tiles& tiles(DType w) {
  static const Tiles f32 = tiles_for<DType::F32>(), bf16 = tiles_for<DType::BF16>(),
                     f16 = tiles_for<DType::F16>();
  return w == DType::F32 ? f32 : w == DType::BF16 ? bf16 : f16;
}

void segment_rows(const DenseMatrix& w, const DenseSegment& s, const float* xp, int64_t m,
                  int64_t r0, int64_t r1, void* y, DType act) {
  const int64_t n = w.n, k = w.k, k8 = round_up(k, 8);
  const size_t row_bytes = static_cast<size_t>(k) * dtype_size(s.dtype);
  const Tiles& tl = tiles(s.dtype);
  const uint8_t* ptr[8];
  float out[8 * kTokTile];
  for (int64_t b0 = r0; b0 < r1; b0 += kRowBlock) {
    const int64_t b1 = std::min(r1, b0 + kRowBlock);
    for (int64_t t0 = 0; t0 < m; t0 += kTokTile) {
      const int tt = static_cast<int>(std::min<int64_t>(kTokTile, m - t0));
      for (int64_t r = b0; r < b1;) {
        const int rr = r + tl.rows[tt] <= b1 ? tl.rows[tt] : 1;
        for (int i = 0; i < rr; ++i) ptr[i] = s.data + (r + i - s.row0) * row_bytes;
        (rr > 1 ? tl.wide[tt] : tl.single[tt])(ptr, k, xp + t0 * k8, k8, out);
        for (int i = 0; i < rr; ++i, ++r) {
          const float bias = w.bias.empty() ? 0.0f : w.bias[r];
          for (int t = 0; t < tt; ++t) store_act(y, act, (t0 + t) * n + r, out[i * tt + t] + bias);
        }
      }
    }
  }
}

}  // namespace

std::vector<float> dense_input(const void* x, DType act, int64_t m, int64_t k) {
  const int64_t k8 = round_up(k, 8);
  const size_t es = dtype_size(act);
  std::vector<float> xp(static_cast<size_t>(m * k8), 0.0f);
  for (int64_t t = 0; t < m; ++t)
    to_f32_n(static_cast<const uint8_t*>(x) + t * k * es, act, xp.data() + t * k8, static_cast<size_t>(k));
  return xp;
}

void dense_rows_avx2(const DenseMatrix& w, const float* xp, int64_t m, int64_t r0, int64_t r1,
                     void* y, DType act) {
  for (const DenseSegment& s : w.segments) {
    const int64_t a = std::max(r0, s.row0), b = std::min(r1, s.row0 + s.rows);
    if (a < b) segment_rows(w, s, xp, m, a, b, y, act);
  }
}

}  // namespace fp4lm::kernels::cpu
