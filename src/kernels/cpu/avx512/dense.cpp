// Dense GEMM/GEMV on AVX-512 for BF16 weights (lm_head, routers, vision towers, excluded layers):
// each 32-element chunk of a row is one load of 32 bf16 weights and one vdpbf16ps per activation
// piece (x = Σ pieces exactly, 1 for bf16, 2 for f16, 3 for f32 activations), so every product
// is exact (bf16 × bf16 fits fp32) and accumulated in fp32: one 16-lane accumulator per
// (row, token) along k, a fixed horizontal sum, + bias (docs/KERNELS.md, "AVX-512 dense").
// The last chunk is a zero-masked load, so any k works. Every (row, token) result is the same
// instruction sequence whatever the tile, so a token's bits do not depend on its batch.
//
// Instantiated twice, as the W4A16 kernels (common.h, dot_bf16): with vdpbf16ps (AVX512-BF16),
// and (E, for Ice Lake) with its two-FMA form — odd halves, then even halves — where the
// activation pieces are packed pre-split into their odd and even fp32 halves (two vectors per
// piece), so only the weight vector is masked and shifted, once per row and chunk, shared by
// the tile's tokens. Tiles: M=1 streams 8 rows at once; M>1 native 4 rows × 4 tokens (their 16
// sums reduced together by hsum16, outputs stored 16 rows at a time: rows_native); emulated
// kRowsE rows × kTokE tokens (two FMAs per product pair need more accumulators to hide their
// latency and more tokens per split weight vector).
#include <utility>

#include "kernels/cpu/avx512/dense.h"
#include "kernels/cpu/avx512/gemm_common.h"

namespace fp4lm::kernels::cpu::avx512 {

namespace {

constexpr int64_t kChunk = 32;
// Vectors per (chunk, piece) of a packed token: the bf16 piece, or (emulated) its odd and even
// halves as fp32.
constexpr int piece_vectors(bool emulated) { return emulated ? 2 : 1; }

// The R × T accumulators of a tile: per 32-column chunk the R rows' weights (the tail masked),
// then `step(c, w, acc)` adds their products with the T tokens' activations.
template <int R, int T, class Step>
void tile_sums(const uint16_t* const* rows, int64_t k, __m512 (&acc)[R][T], Step&& step) {
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = _mm512_setzero_ps();
  const int64_t chunks = (k + kChunk - 1) / kChunk, full = k / kChunk;
  const __mmask32 tail = static_cast<__mmask32>((uint64_t{1} << (k - full * kChunk)) - 1);
  for (int64_t c = 0; c < chunks; ++c) {
    __m512i w[R];
    for (int r = 0; r < R; ++r)
      w[r] = c < full ? _mm512_loadu_si512(rows[r] + c * kChunk) : _mm512_maskz_loadu_epi16(tail, rows[r] + c * kChunk);
    step(c, w, acc);
  }
}

// Native BF16: one vdpbf16ps per (row, token, piece) and chunk.
template <int R, int T, int P>
void native_step(int64_t c, const __m512i* w, const __m512i* xp, int64_t tstride, __m512 (&acc)[R][T]) {
  for (int t = 0; t < T; ++t)
    for (int p = 0; p < P; ++p) {
      const __m512i xv = _mm512_load_si512(xp + t * tstride + c * P + p);
      for (int r = 0; r < R; ++r) acc[r][t] = dot_bf16<false>(acc[r][t], w[r], xv);
    }
}

template <int R, int T, int P, bool E>
void tile(const uint16_t* const* rows, int64_t k, const __m512i* xp, int64_t tstride, float* out) {
  constexpr int D = piece_vectors(E);
  __m512 acc[R][T];
  tile_sums<R, T>(rows, k, acc, [&](int64_t c, const __m512i* w, __m512 (&acc)[R][T]) {
    if constexpr (E) {
      // dot_bf16<true> with the activation halves already split: odd, then even, per piece.
      __m512 wo[R], we[R];
      for (int r = 0; r < R; ++r) {
        wo[r] = _mm512_castsi512_ps(_mm512_and_si512(w[r], _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
        we[r] = _mm512_castsi512_ps(_mm512_slli_epi32(w[r], 16));
      }
      for (int t = 0; t < T; ++t)
        for (int p = 0; p < P; ++p) {
          const __m512i* x = xp + t * tstride + (c * P + p) * D;
          const __m512 xo = _mm512_castsi512_ps(_mm512_load_si512(x)), xe = _mm512_castsi512_ps(_mm512_load_si512(x + 1));
          for (int r = 0; r < R; ++r) acc[r][t] = _mm512_fmadd_ps(we[r], xe, _mm512_fmadd_ps(wo[r], xo, acc[r][t]));
        }
    } else {
      native_step<R, T, P>(c, w, xp, tstride, acc);
    }
  });
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = hsum(acc[r][t]);
}

// hsum of 16 vectors at once: lane 4j + i of the result = hsum(a[4i + j]), bit for bit — the
// same pairings in the same operand order as hsum (lanes j + j+8, then + 4, + 2, + 1, the lower
// lane first), done lane-wise after 128-bit and in-lane shuffles: 30 shuffles and 15 adds for 16
// sums instead of about 7 ops each plus the scalar extracts.
inline __m512 hsum16(const __m512* a) {
  __m512 z[8], w[4], v[2];
  for (int p = 0; p < 8; ++p)
    z[p] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * p], a[2 * p + 1], 0xEE));
  for (int q = 0; q < 4; ++q)
    w[q] = _mm512_add_ps(_mm512_shuffle_f32x4(z[2 * q], z[2 * q + 1], 0x88),
                         _mm512_shuffle_f32x4(z[2 * q], z[2 * q + 1], 0xDD));
  for (int h = 0; h < 2; ++h)
    v[h] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * h], w[2 * h + 1], 0x44), _mm512_shuffle_ps(w[2 * h], w[2 * h + 1], 0xEE));
  return _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], 0x88), _mm512_shuffle_ps(v[0], v[1], 0xDD));
}

// Native BF16, M > 1: an R × T tile (the same vdpbf16ps chain per (row, token) as `tile`), its
// sums written to out[t * ld + r]: for R = 4 by hsum16 on four tokens at once (the lanes of token
// group g: lane 4t + r = token 4g + t, row r; past T the last token again, unused).
template <int R, int T, int P>
void tile_n(const uint16_t* const* rows, int64_t k, const __m512i* xp, int64_t tstride, float* out, int64_t ld) {
  __m512 acc[R][T];
  tile_sums<R, T>(rows, k, acc, [&](int64_t c, const __m512i* w, __m512 (&acc)[R][T]) {
    native_step<R, T, P>(c, w, xp, tstride, acc);
  });
  if constexpr (R == 4) {
    for (int g = 0; g < T; g += 4) {
      __m512 a[16];
      for (int r = 0; r < 4; ++r)
        for (int t = 0; t < 4; ++t) a[4 * r + t] = acc[r][g + t < T ? g + t : T - 1];
      const __m512 v = hsum16(a);
      _mm_storeu_ps(out + (g + 0) * ld, _mm512_castps512_ps128(v));
      if (g + 1 < T) _mm_storeu_ps(out + (g + 1) * ld, _mm512_extractf32x4_ps(v, 1));
      if (g + 2 < T) _mm_storeu_ps(out + (g + 2) * ld, _mm512_extractf32x4_ps(v, 2));
      if (g + 3 < T) _mm_storeu_ps(out + (g + 3) * ld, _mm512_extractf32x4_ps(v, 3));
    }
  } else {
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t) out[t * ld + r] = hsum(acc[r][t]);
  }
}

// Register tiles for M > 1 (see the file comment). Emulated: per chunk R × (1 + T) vector ops
// besides the loads (the split, then 2 FMAs per row and token) for 32 R T multiply-adds. Measured
// per core on Ice Lake (thread CPU time, best of 4 interleaved runs, the vision tower's shapes
// at M = 256, G multiply-adds/s): 4 × 5 (rows × tokens) 54-55, 4 × 6 50-56, 4 × 4 ~46-54,
// 3 × 8 27-30, 3 × 6 31-39, 6 × 4 34-48, 8 × 2 27-32; 4 × 5 with k blocked in 16-48 chunks (the
// tile's activations kept in L1) was no faster (46-55).
constexpr int kTokN = 4, kRowsN = 4;
constexpr int kTokE = 5, kRowsE = 4;
constexpr int kTokMax = kTokE > kTokN ? kTokE : kTokN;
constexpr int kGemvRows = 8;
constexpr int64_t kBlock = 48;  // rows whose weights stay in L2 while all token tiles pass
static_assert(kBlock % kRowsN == 0 && kBlock % kRowsE == 0 && kBlock % kGemvRows == 0);

using TileFn = void (*)(const uint16_t* const*, int64_t, const __m512i*, int64_t, float*);

// Per token count tt of a token tile (1..tok): the tile over `rows(tt)` rows, and the one-row tile
// for a row block's remainder.
template <int P, bool E, class Seq>
struct TileRows;
template <int P, bool E, int... T>
struct TileRows<P, E, std::integer_sequence<int, T...>> {
  static constexpr int rows_wide = E ? kRowsE : kRowsN;
  static constexpr TileFn wide[] = {nullptr, (T == 0 ? tile<kGemvRows, 1, P, E> : tile<rows_wide, T + 1, P, E>)...};
  static constexpr TileFn one[] = {nullptr, tile<1, T + 1, P, E>...};
};

template <int P, bool E>
struct Tiles : TileRows<P, E, std::make_integer_sequence<int, E ? kTokE : kTokN>> {
  static constexpr int tok = E ? kTokE : kTokN;
  static constexpr int rows(int tt) { return tt == 1 ? kGemvRows : Tiles::rows_wide; }
};

// Native BF16 tiles for M > 1: kRowsB rows × up to kTokB tokens (the row block's outputs gathered
// per token, then + bias and the act dtype 16 rows per store).
constexpr int kRowsB = 4, kTokB = 4;
static_assert(kBlock % kRowsB == 0 && kRowsB == 4);
using TileNFn = void (*)(const uint16_t* const*, int64_t, const __m512i*, int64_t, float*, int64_t);
template <int P, class Seq>
struct TilesN;
template <int P, int... T>
struct TilesN<P, std::integer_sequence<int, T...>> {
  static constexpr TileNFn wide[] = {nullptr, tile_n<kRowsB, T + 1, P>...};
  static constexpr TileNFn one[] = {nullptr, tile_n<1, T + 1, P>...};
};

template <int P>
void rows_native(const uint16_t* w, int64_t row0, int64_t n, int64_t k, const float* bias, const __m512i* xp, int64_t m,
                 int64_t r0, int64_t r1, void* y, DType act) {
  using Tn = TilesN<P, std::make_integer_sequence<int, kTokB>>;
  const int64_t tstride = (k + kChunk - 1) / kChunk * P;
  const uint16_t* ptr[kRowsB];
  alignas(64) float out[kTokB][kBlock];
  for (int64_t b0 = r0; b0 < r1; b0 += kBlock) {
    const int64_t b1 = b0 + kBlock < r1 ? b0 + kBlock : r1;
    for (int64_t t0 = 0; t0 < m; t0 += kTokB) {
      const int tt = static_cast<int>(m - t0 < kTokB ? m - t0 : kTokB);
      for (int64_t r = b0; r < b1;) {
        const int rr = r + kRowsB <= b1 ? kRowsB : 1;
        for (int i = 0; i < rr; ++i) ptr[i] = w + (r + i - row0) * k;
        (rr > 1 ? Tn::wide[tt] : Tn::one[tt])(ptr, k, xp + t0 * tstride, tstride, &out[0][r - b0], kBlock);
        r += rr;
      }
      // + bias (+ 0 without one, as the M = 1 path adds), then the act dtype.
      for (int t = 0; t < tt; ++t)
        for (int64_t j = 0; j < b1 - b0; j += 16) {
          const __mmask16 mask = lane_mask(static_cast<int>(b1 - b0 - j));
          const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + b0 + j) : _mm512_setzero_ps();
          store16_act(y, act, (t0 + t) * n + b0 + j, mask, _mm512_add_ps(_mm512_maskz_loadu_ps(mask, &out[t][j]), b));
        }
    }
  }
}

template <int P, bool E>
void rows_p(const uint16_t* w, int64_t row0, int64_t n, int64_t k, const float* bias, const __m512i* xp, int64_t m,
            int64_t r0, int64_t r1, void* y, DType act) {
  if constexpr (!E) {
    if (m > 1) return rows_native<P>(w, row0, n, k, bias, xp, m, r0, r1, y, act);
  }
  using Tl = Tiles<P, E>;
  const int64_t tstride = (k + kChunk - 1) / kChunk * P * piece_vectors(E);
  const uint16_t* ptr[kGemvRows];
  float out[kGemvRows * kTokMax];
  for (int64_t b0 = r0; b0 < r1; b0 += kBlock) {
    const int64_t b1 = b0 + kBlock < r1 ? b0 + kBlock : r1;
    for (int64_t t0 = 0; t0 < m; t0 += Tl::tok) {
      const int tt = static_cast<int>(m - t0 < Tl::tok ? m - t0 : Tl::tok);
      for (int64_t r = b0; r < b1;) {
        const int rr = r + Tl::rows(tt) <= b1 ? Tl::rows(tt) : 1;
        for (int i = 0; i < rr; ++i) ptr[i] = w + (r + i - row0) * k;
        (rr > 1 ? Tl::wide[tt] : Tl::one[tt])(ptr, k, xp + t0 * tstride, tstride, out);
        for (int i = 0; i < rr; ++i, ++r)
          for (int t = 0; t < tt; ++t) store_act(y, act, (t0 + t) * n + r, out[i * tt + t] + (bias ? bias[r] : 0.0f));
      }
    }
  }
}

}  // namespace

int64_t dense_token_words(int64_t k, int pieces, bool native_bf16) {
  return (k + kChunk - 1) / kChunk * pieces * kChunk * piece_vectors(!native_bf16);
}

void dense_pack_token(const float* x, int64_t k, int pieces, uint16_t* out, bool native_bf16) {
  const int64_t chunks = (k + kChunk - 1) / kChunk;
  alignas(64) uint16_t h[3 * kChunk];
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t rem = k - c * kChunk;
    const __mmask16 ma = static_cast<__mmask16>(rem >= 16 ? 0xFFFF : (1u << rem) - 1);
    const __mmask16 mb = static_cast<__mmask16>(rem >= 32 ? 0xFFFF : rem <= 16 ? 0 : (1u << (rem - 16)) - 1);
    const __m512 a = _mm512_maskz_loadu_ps(ma, x + c * kChunk), b = _mm512_maskz_loadu_ps(mb, x + c * kChunk + 16);
    if (native_bf16) {
      bf16_pieces<false>(a, b, pieces, out + c * pieces * kChunk);
      continue;
    }
    // Each piece as the emulated form converts it, then split: the odd halves (the high words of
    // the dwords) and the even halves, each as fp32 (dot_bf16<true>'s operands).
    bf16_pieces<true>(a, b, pieces, h);
    for (int p = 0; p < pieces; ++p) {
      const __m512i v = _mm512_load_si512(h + p * kChunk);
      uint16_t* o = out + (c * pieces + p) * 2 * kChunk;
      _mm512_store_si512(o, _mm512_and_si512(v, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
      _mm512_store_si512(o + kChunk, _mm512_slli_epi32(v, 16));
    }
  }
}

void dense_bf16_rows(const uint16_t* w, int64_t row0, int64_t n, int64_t k, const float* bias, const uint16_t* xp,
                     int64_t m, int pieces, int64_t r0, int64_t r1, void* y, DType act, bool native_bf16) {
  const auto* x = reinterpret_cast<const __m512i*>(xp);
  with_pieces_and_bf16(pieces, native_bf16,
                       [&]<int P, bool E>() { rows_p<P, E>(w, row0, n, k, bias, x, m, r0, r1, y, act); });
}

}  // namespace fp4lm::kernels::cpu::avx512
