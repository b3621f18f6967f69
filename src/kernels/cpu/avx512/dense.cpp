// Dense GEMM/GEMV on AVX-512 BF16 for BF16 weights (lm_head, routers, excluded layers): each
// 32-element chunk of a row is one load of 32 bf16 weights and one vdpbf16ps per activation
// piece (x = Σ pieces exactly, 1 for bf16, 2 for f16, 3 for f32 activations), so every product
// is exact (bf16 × bf16 fits fp32) and accumulated in fp32: one 16-lane accumulator per
// (row, token) along k, a fixed horizontal sum, + bias (docs/KERNELS.md, "AVX-512 dense").
// The last chunk is a zero-masked load, so any k works. Tiles: M=1 streams 8 rows at once; M>1
// runs 4 rows × 4 tokens. Every (row, token) result is the same instruction sequence.
#include "kernels/cpu/avx512/dense.h"
#include "kernels/cpu/avx512/common.h"

namespace fp4lm::kernels::cpu::avx512 {

namespace {

constexpr int64_t kChunk = 32;

template <int R, int T, int P>
void tile(const uint16_t* const* rows, int64_t k, const __m512i* xp, int64_t tstride, float* out) {
  __m512 acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const int64_t chunks = (k + kChunk - 1) / kChunk, full = k / kChunk;
  const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (k - full * kChunk)) - 1);
  for (int64_t c = 0; c < chunks; ++c) {
    __m512i w[R];
    for (int r = 0; r < R; ++r)
      w[r] = c < full ? _mm512_loadu_si512(rows[r] + c * kChunk) : _mm512_maskz_loadu_epi16(tail, rows[r] + c * kChunk);
    for (int t = 0; t < T; ++t)
      for (int p = 0; p < P; ++p) {
        const __m512i xv = _mm512_load_si512(xp + t * tstride + c * P + p);
        for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(acc[r][t], bh(w[r]), bh(xv));
      }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

using TileFn = void (*)(const uint16_t* const*, int64_t, const __m512i*, int64_t, float*);

template <int P>
struct Tiles {
  static constexpr TileFn wide[kTokTile + 1] = {nullptr, tile<8, 1, P>, tile<4, 2, P>, tile<4, 3, P>, tile<4, 4, P>};
  static constexpr TileFn one[kTokTile + 1] = {nullptr, tile<1, 1, P>, tile<1, 2, P>, tile<1, 3, P>, tile<1, 4, P>};
  static constexpr int rows[kTokTile + 1] = {0, 8, 4, 4, 4};
};

template <int P>
void rows_p(const uint16_t* w, int64_t row0, int64_t n, int64_t k, const float* bias, const __m512i* xp, int64_t m,
            int64_t r0, int64_t r1, void* y, DType act) {
  const int64_t tstride = (k + kChunk - 1) / kChunk * P;
  const uint16_t* ptr[8];
  float out[8 * kTokTile];
  constexpr int64_t kBlock = 48;  // rows whose weights stay in L2 while all token tiles pass
  for (int64_t b0 = r0; b0 < r1; b0 += kBlock) {
    const int64_t b1 = b0 + kBlock < r1 ? b0 + kBlock : r1;
    for (int64_t t0 = 0; t0 < m; t0 += kTokTile) {
      const int tt = static_cast<int>(m - t0 < kTokTile ? m - t0 : kTokTile);
      for (int64_t r = b0; r < b1;) {
        const int rr = r + Tiles<P>::rows[tt] <= b1 ? Tiles<P>::rows[tt] : 1;
        for (int i = 0; i < rr; ++i) ptr[i] = w + (r + i - row0) * k;
        (rr > 1 ? Tiles<P>::wide[tt] : Tiles<P>::one[tt])(ptr, k, xp + t0 * tstride, tstride, out);
        for (int i = 0; i < rr; ++i, ++r)
          for (int t = 0; t < tt; ++t) store_act(y, act, (t0 + t) * n + r, out[i * tt + t] + (bias ? bias[r] : 0.0f));
      }
    }
  }
}

}  // namespace

int64_t dense_token_words(int64_t k, int pieces) { return (k + kChunk - 1) / kChunk * pieces * kChunk; }

void dense_pack_token(const float* x, int64_t k, int pieces, uint16_t* out) {
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t rem = k - c * kChunk;
    const __mmask16 ma = static_cast<__mmask16>(rem >= 16 ? 0xFFFF : (1u << rem) - 1);
    const __mmask16 mb = static_cast<__mmask16>(rem >= 32 ? 0xFFFF : rem <= 16 ? 0 : (1u << (rem - 16)) - 1);
    bf16_pieces(_mm512_maskz_loadu_ps(ma, x + c * kChunk), _mm512_maskz_loadu_ps(mb, x + c * kChunk + 16), pieces,
                out + c * pieces * kChunk);
  }
}

void dense_bf16_rows(const uint16_t* w, int64_t row0, int64_t n, int64_t k, const float* bias, const uint16_t* xp,
                     int64_t m, int pieces, int64_t r0, int64_t r1, void* y, DType act) {
  const auto* x = reinterpret_cast<const __m512i*>(xp);
  switch (pieces) {
    case 1: return rows_p<1>(w, row0, n, k, bias, x, m, r0, r1, y, act);
    case 2: return rows_p<2>(w, row0, n, k, bias, x, m, r0, r1, y, act);
    default: return rows_p<3>(w, row0, n, k, bias, x, m, r0, r1, y, act);
  }
}

}  // namespace fp4lm::kernels::cpu::avx512
