// NVFP4 W4A16 GEMM on AVX-512-BF16 for many tokens (m >= kW4a16GemmMinTokens): the same
// arithmetic as nvfp4_w4a16.cpp, bit for bit, in a register-blocked layout whose vector lanes are
// 16 output rows instead of a row's 16 blocks (docs/KERNELS.md, "AVX-512 W4A16 GEMM").
//
// Why the same bits: the project guarantees that a sequence's tokens do not depend on what else
// is in the batch, and m (the batch) chooses between this kernel and the register schedule. So
// every (row, token) result runs the sequence of nvfp4_w4a16.cpp exactly (docs/KERNELS.md, "W4A16
// numbers"): the weights are the same exact bf16 (E2M1 × block scale, nvfp4_bf16_weights.h); per
// block position i (0-15) one fp32 chain acc_i, over the super-chunks in order, of the 8 × P
// vdpbf16ps of its pairs in the same order (each pair in the same even/odd words); then the 16
// acc_i summed in hsum's tree, then the same scalar epilogue.
//
// Layout: a group of rows is decoded once per call (the shared decoder, then a 16 × 16 dword
// transpose) into per 16-row vector, block position i, super-chunk c: 8 vectors of 16 rows × one
// bf16 pair. Activations are repacked as dwords (bf16 pairs) in tiles of 6 tokens,
// [tile][i][c][v][piece][token], so a tile's broadcasts are one pointer plus constants and walk
// memory forward. Tiles of 4 row vectors (64 rows) × 6 tokens (24 accumulators: with the scales
// folded there is no per-block partial to hold): per pair, 4 weight loads and 6 broadcasts feed
// 24 vdpbf16ps.
#include <array>
#include <utility>

#include "kernels/cpu/avx512/common.h"
#include "kernels/cpu/avx512/gemm_common.h"
#include "kernels/cpu/avx512/nvfp4_bf16_weights.h"

namespace fp4lm::kernels::cpu::avx512 {

namespace {

constexpr int kGemmVecs = kVectors;        // per (row vector, i, c): 8 pair vectors
constexpr int kTileRv = 4, kTileT = 6;     // register tile: row vectors × tokens

// out[rv][t][16 rows] (rv < RV, t < T, stride kTileT tokens) for RV row vectors × T tokens. rv_stride: vectors between row

template <int RV, int T, int P>
void gemm_tile(const void* panel_bytes, int64_t rv_stride, int64_t chunks, const uint32_t* xp, float* out) {
  const auto* panel = static_cast<const __m512i*>(panel_bytes);
  __m512 sums[kLanes][RV][T];
  for (int i = 0; i < kLanes; ++i) {
    __m512 acc[RV][T];
    for (int rv = 0; rv < RV; ++rv)
      for (int t = 0; t < T; ++t) acc[rv][t] = _mm512_setzero_ps();
    const __m512i* w = panel + i * chunks * kGemmVecs;
    const uint32_t* x = xp + i * chunks * kVectors * P * kTileT;
    for (int64_t c = 0; c < chunks; ++c, w += kGemmVecs, x += kVectors * P * kTileT) {
#pragma GCC unroll 8
      for (int v = 0; v < kVectors; ++v) {
        __m512i wv[RV];
        for (int rv = 0; rv < RV; ++rv) wv[rv] = _mm512_load_si512(w + rv * rv_stride + v);
#pragma GCC unroll 3
        for (int p = 0; p < P; ++p)
          for (int t = 0; t < T; ++t) {
            const __m512i xv = _mm512_set1_epi32(static_cast<int>(x[(v * P + p) * kTileT + t]));
            for (int rv = 0; rv < RV; ++rv) acc[rv][t] = _mm512_dpbf16_ps(acc[rv][t], bh(wv[rv]), bh(xv));
          }
      }
    }
    for (int rv = 0; rv < RV; ++rv)
      for (int t = 0; t < T; ++t) sums[i][rv][t] = acc[rv][t];
  }
  // hsum's tree (common.h), lane-wise: ((s_j + s_j+8) + (s_j+4 + s_j+12)) pairs, then the halves.
  for (int rv = 0; rv < RV; ++rv)
    for (int t = 0; t < T; ++t) {
      __m512 a[8], b[4];
      for (int j = 0; j < 8; ++j) a[j] = _mm512_add_ps(sums[j][rv][t], sums[j + 8][rv][t]);
      for (int j = 0; j < 4; ++j) b[j] = _mm512_add_ps(a[j], a[j + 4]);
      _mm512_store_ps(out + (rv * kTileT + t) * kLanes, _mm512_add_ps(_mm512_add_ps(b[0], b[2]), _mm512_add_ps(b[1], b[3])));
    }
}

// nvfp4_w4a16.cpp's epilogue for 16 rows [r, r + 16) of token t (lanes past `rows` not stored),
// the same operations lane-wise: fma(v, global, bias) (nvfp4_w4a16.cpp
// writes it as std::fma: same rounding at any optimization level), then store_act's conversions
// (store16_act).
inline void epilogue16(const Rows& w, int64_t r, int rows, int64_t t, __m512 v, void* y, DType act) {
  const __mmask16 mask = lane_mask(rows);
  const __m512 g = _mm512_maskz_loadu_ps(mask, w.global + r);
  const __m512 b = w.bias ? _mm512_maskz_loadu_ps(mask, w.bias + r) : _mm512_setzero_ps();
  store16_act(y, act, t * w.n + r, mask, _mm512_fmadd_ps(v, g, b));
}

// Decodes `rows` rows (at most 16; the rest zero) into one row vector's panel:
// panel[(i * chunks + c) * kGemmVecs + v] lane r = row r's dword (block i, vector v) of
// super-chunk c, as scaled bf16 weights (gemm_common.h's decode_row_vector, without the scales).
void decode_scaled_row_vector(const uint8_t* const* codes, const uint8_t* const* scales, int rows, int64_t k,
                              __m512i* panel) {
  const ScaledBf16Decoder dec;
  const int64_t chunks = super_chunks(k);
  TailBuffer tail;
  __m512i z[kLanes][kVectors];
  for (int64_t c = 0; c < chunks; ++c) {
    for (int r = 0; r < kLanes; ++r) {
      if (r < rows) {
        const SuperChunk sc = super_chunk(codes[r], scales[r], k, c, tail);
        dec(sc.codes, sc.scales, z[r]);
      } else {
        for (int v = 0; v < kVectors; ++v) z[r][v] = _mm512_setzero_si512();
      }
    }
    __m512i col[kLanes], out[kLanes];
    for (int v = 0; v < kVectors; ++v) {
      for (int r = 0; r < kLanes; ++r) col[r] = z[r][v];
      transpose16(col, out);
      for (int i = 0; i < kLanes; ++i) _mm512_store_si512(panel + (i * chunks + c) * kGemmVecs + v, out[i]);
    }
  }
}

// Rows per decoded group: a multiple of kTileRv row vectors, about 768 KiB of panel.
int64_t group_rows(int64_t k) {
  const int64_t rv_bytes = kLanes * super_chunks(k) * kGemmVecs * 64;
  const int64_t fit = (768 << 10) / (kTileRv * rv_bytes);
  return (fit < 1 ? 1 : fit > 4 ? 4 : fit) * kTileRv * kLanes;
}

using TileFn = void (*)(const void*, int64_t, int64_t, const uint32_t*, float*);
template <int P, int RV, int... T>
constexpr std::array<TileFn, kTileT + 1> tile_row(std::integer_sequence<int, T...>) {
  return {nullptr, gemm_tile<RV, T + 1, P>...};
}
template <int P, int... R>
constexpr std::array<std::array<TileFn, kTileT + 1>, kTileRv> tile_table(std::integer_sequence<int, R...>) {
  return {tile_row<P, R + 1>(std::make_integer_sequence<int, kTileT>{})...};
}

template <int P>
void gemm_rows_p(const Rows& w, const uint32_t* xp, int64_t m, int64_t r0, int64_t r1, void* y, DType act) {
  static constexpr auto tiles = tile_table<P>(std::make_integer_sequence<int, kTileRv>{});  // [rv - 1][tokens]
  const int64_t chunks = super_chunks(w.k), group = group_rows(w.k);
  const int64_t rv_stride = kLanes * chunks * kGemmVecs, tile_dwords = chunks * kLanes * kVectors * P * kTileT;
  auto* panel = static_cast<__m512i*>(thread_scratch(static_cast<size_t>(group / kLanes * rv_stride * 64)));
  for (int64_t g0 = r0; g0 < r1; g0 += group) {
    const int64_t rows = (g0 + group < r1 ? g0 + group : r1) - g0;
    const int rvs = static_cast<int>((rows + kLanes - 1) / kLanes);
    for (int rv = 0; rv < rvs; ++rv) {
      const int64_t first = g0 + rv * kLanes;
      const int n = static_cast<int>(rows - rv * kLanes < kLanes ? rows - rv * kLanes : kLanes);
      decode_scaled_row_vector(w.codes + first, w.scales + first, n, w.k, panel + rv * rv_stride);
    }
    for (int64_t t0 = 0; t0 < m; t0 += kTileT) {
      const int tt = static_cast<int>(m - t0 < kTileT ? m - t0 : kTileT);
      for (int rv = 0; rv < rvs;) {
        const int nr = rv + kTileRv <= rvs ? kTileRv : 1;
        alignas(64) float out[kTileRv * kTileT * kLanes];
        tiles[nr - 1][tt](panel + rv * rv_stride, rv_stride, chunks, xp + t0 / kTileT * tile_dwords, out);
        for (int j = 0; j < nr; ++j, ++rv) {
          const int64_t r = g0 + rv * kLanes;
          const int n = static_cast<int>(g0 + rows - r);
          for (int t = 0; t < tt; ++t)
            epilogue16(w, r, n, t0 + t, _mm512_load_ps(out + (j * kTileT + t) * kLanes), y, act);
        }
      }
    }
  }
}

}  // namespace

int64_t w4a16_gemm_input_words(int64_t m, int64_t k, int pieces) {
  return (m + kTileT - 1) / kTileT * kTileT * w4a16_token_words(k, pieces);
}

void w4a16_gemm_pack_token(const float* x, int64_t t, int64_t k, int pieces, uint16_t* scratch, uint16_t* out) {
  // The register kernel's packing (chunk c, vector v, piece p: dword i = block i's pair), then
  // the dwords reordered to token tile t / 6, [i][c][v][p], slot t % 6.
  w4a16_pack_token(x, k, pieces, scratch);
  const int64_t chunks = super_chunks(k);
  const auto* in = reinterpret_cast<const uint32_t*>(scratch);
  auto* o = reinterpret_cast<uint32_t*>(out) + t / kTileT * (kTileT * w4a16_token_words(k, pieces) / 2) + t % kTileT;
  for (int64_t c = 0; c < chunks; ++c)
    for (int v = 0; v < kVectors; ++v)
      for (int p = 0; p < pieces; ++p)
        for (int i = 0; i < kLanes; ++i)
          o[(((i * chunks + c) * kVectors + v) * pieces + p) * kTileT] = in[((c * kVectors + v) * pieces + p) * kLanes + i];
}

int64_t w4a16_gemm_row_block(int64_t m, int64_t k) {
  return m >= kW4a16GemmMinTokens ? group_rows(k) : w4a16_row_block(m, k);
}

void w4a16_gemm_rows(const Rows& w, const uint16_t* xp, int64_t m, int pieces, int64_t r0, int64_t r1, void* y,
                     DType act) {
  const auto* x = reinterpret_cast<const uint32_t*>(xp);
  switch (pieces) {
    case 1: return gemm_rows_p<1>(w, x, m, r0, r1, y, act);
    case 2: return gemm_rows_p<2>(w, x, m, r0, r1, y, act);
    default: return gemm_rows_p<3>(w, x, m, r0, r1, y, act);
  }
}

}  // namespace fp4lm::kernels::cpu::avx512
