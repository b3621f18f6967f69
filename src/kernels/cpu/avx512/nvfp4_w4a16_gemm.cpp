// NVFP4 W4A16 GEMM on AVX-512-BF16 for many tokens (m >= kW4a16GemmMinTokens): the same
// arithmetic as nvfp4_w4a16.cpp, bit for bit, in a register-blocked layout whose vector lanes are
// 16 output rows instead of a row's 16 blocks (docs/KERNELS.md, "AVX-512 W4A16 GEMM").
//
// Why the same bits: the project guarantees that a sequence's tokens do not depend on what else
// is in the batch, and m (the batch) chooses between this kernel and the register schedule. So
// every (row, token) result runs the per-block sequence of nvfp4_w4a16.cpp exactly: per block,
// `part = 0`, the 8 × P vdpbf16ps of its pairs in the same order (each pair in the same even/odd
// words), `acc_i = fma(part, scale × 2^-8, acc_i)` per block position i (0-15) over the
// super-chunks, then the 16 acc_i summed in hsum's tree, then the same scalar epilogue.
//
// Layout: a group of rows is decoded once per call (the shared Decoder, then a 16 × 16 dword
// transpose) into per 16-row vector, block position i, super-chunk c: 8 vectors of 16 rows × one
// bf16 pair, and the 16 rows' block scales. Activations are repacked as dwords (bf16 pairs) in
// tiles of 6 tokens, [tile][i][c][v][piece][token], so a tile's broadcasts are one pointer plus
// constants and walk memory forward. Tiles of
// 2 row vectors (32 rows) × 6 tokens: per pair, 2 weight loads and 6 broadcasts feed 12
// vdpbf16ps (the panel kernel: 7 full-vector loads per 12, from L2 at long k). Instantiated
// with vdpbf16ps and with its two-FMA form (common.h, dot_bf16), as nvfp4_w4a16.cpp.
#include <array>
#include <utility>

#include "kernels/cpu/avx512/common.h"
#include "kernels/cpu/avx512/gemm_common.h"
#include "kernels/cpu/avx512/nvfp4_w4a16_decode.h"

namespace fp4lm::kernels::cpu::avx512 {

namespace {

constexpr int kGemmVecs = kVectors + 1;    // per (row vector, i, c): 8 pair vectors + the scales
constexpr int kTileRv = 2, kTileT = 6;     // register tile: row vectors × tokens
// Dwords per activation pair in the token tiles: the pair as it is (native BF16), or (emulated)
// pre-split into its odd and even halves as fp32 (dot_bf16<true>'s operands), so the inner loop
// broadcasts them from memory instead of masking and shifting each broadcast: the same values,
// hence the same bits as the register kernel's dot_bf16<true>, with a third of the vector ops.
constexpr int pair_dwords(bool emulated) { return emulated ? 2 : 1; }

// out[rv][t][16 rows] (rv < RV, t < T, stride kTileT tokens) for RV row vectors × T tokens. rv_stride: vectors between row
// vectors in the panel; xp: the token tile (w4a16_gemm_pack_token's layout).
template <int RV, int T, int P, bool E>
void gemm_tile(const void* panel_bytes, int64_t rv_stride, int64_t chunks, const uint32_t* xp, float* out) {
  const auto* panel = static_cast<const __m512i*>(panel_bytes);
  __m512 sums[kLanes][RV][T];
  for (int i = 0; i < kLanes; ++i) {
    __m512 acc[RV][T];
    for (int rv = 0; rv < RV; ++rv)
      for (int t = 0; t < T; ++t) acc[rv][t] = _mm512_setzero_ps();
    const __m512i* w = panel + i * chunks * kGemmVecs;
    constexpr int D = pair_dwords(E);
    const uint32_t* x = xp + i * chunks * kVectors * P * D * kTileT;
    for (int64_t c = 0; c < chunks; ++c, w += kGemmVecs, x += kVectors * P * D * kTileT) {
      __m512 part[RV][T];
#pragma GCC unroll 8
      for (int v = 0; v < kVectors; ++v) {
        __m512i wv[RV];
        for (int rv = 0; rv < RV; ++rv) wv[rv] = _mm512_load_si512(w + rv * rv_stride + v);
        if constexpr (E) {
          // dot_bf16<true> with the activation halves already split: odd, then even.
          __m512 wo[RV], we[RV];
          for (int rv = 0; rv < RV; ++rv) {
            wo[rv] = _mm512_castsi512_ps(_mm512_and_si512(wv[rv], _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
            we[rv] = _mm512_castsi512_ps(_mm512_slli_epi32(wv[rv], 16));
          }
#pragma GCC unroll 3
          for (int p = 0; p < P; ++p)
            for (int t = 0; t < T; ++t) {
              const uint32_t* xd = x + (v * P + p) * 2 * kTileT + t;
              const __m512 xo = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(xd[0])));
              const __m512 xe = _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(xd[kTileT])));
              for (int rv = 0; rv < RV; ++rv) {
                const __m512 a = _mm512_fmadd_ps(wo[rv], xo, v == 0 && p == 0 ? _mm512_setzero_ps() : part[rv][t]);
                part[rv][t] = _mm512_fmadd_ps(we[rv], xe, a);
              }
            }
        } else {
#pragma GCC unroll 3
          for (int p = 0; p < P; ++p)
            for (int t = 0; t < T; ++t) {
              const __m512i xv = _mm512_set1_epi32(static_cast<int>(x[(v * P + p) * kTileT + t]));
              for (int rv = 0; rv < RV; ++rv)
                part[rv][t] = dot_bf16<E>(v == 0 && p == 0 ? _mm512_setzero_ps() : part[rv][t], wv[rv], xv);
            }
        }
      }
      for (int rv = 0; rv < RV; ++rv) {
        const __m512 s = _mm512_castsi512_ps(_mm512_load_si512(w + rv * rv_stride + kVectors));
        for (int t = 0; t < T; ++t) acc[rv][t] = _mm512_fmadd_ps(part[rv][t], s, acc[rv][t]);
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
// the same operations lane-wise: g = global × 2^8 (exact), fma(v, g, bias) (nvfp4_w4a16.cpp
// writes it as std::fma: same rounding at any optimization level), then store_act's conversions
// (store16_act).
inline void epilogue16(const Rows& w, int64_t r, int rows, int64_t t, __m512 v, void* y, DType act) {
  const __mmask16 mask = lane_mask(rows);
  const __m512 g = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, w.global + r), _mm512_set1_ps(kE4m3ScaledInv));
  const __m512 b = w.bias ? _mm512_maskz_loadu_ps(mask, w.bias + r) : _mm512_setzero_ps();
  store16_act(y, act, t * w.n + r, mask, _mm512_fmadd_ps(v, g, b));
}

// Rows per decoded group: a multiple of kTileRv row vectors, about 768 KiB of panel.
int64_t group_rows(int64_t k) {
  const int64_t rv_bytes = kLanes * super_chunks(k) * kGemmVecs * 64;
  const int64_t fit = (768 << 10) / (kTileRv * rv_bytes);
  return (fit < 1 ? 1 : fit > 4 ? 4 : fit) * kTileRv * kLanes;
}

using TileFn = void (*)(const void*, int64_t, int64_t, const uint32_t*, float*);
template <int P, bool E, int RV, int... T>
constexpr std::array<TileFn, kTileT + 1> tile_row(std::integer_sequence<int, T...>) {
  return {nullptr, gemm_tile<RV, T + 1, P, E>...};
}
template <int P, bool E, int... R>
constexpr std::array<std::array<TileFn, kTileT + 1>, kTileRv> tile_table(std::integer_sequence<int, R...>) {
  return {tile_row<P, E, R + 1>(std::make_integer_sequence<int, kTileT>{})...};
}

template <int P, bool E>
void gemm_rows_p(const Rows& w, const uint32_t* xp, int64_t m, int64_t r0, int64_t r1, void* y, DType act) {
  static constexpr auto tiles = tile_table<P, E>(std::make_integer_sequence<int, kTileRv>{});  // [rv - 1][tokens]
  const Decoder dec;
  const int64_t chunks = super_chunks(w.k), group = group_rows(w.k);
  const int64_t rv_stride = kLanes * chunks * kGemmVecs,
                tile_dwords = chunks * kLanes * kVectors * P * pair_dwords(E) * kTileT;
  auto* panel = static_cast<__m512i*>(thread_scratch(static_cast<size_t>(group / kLanes * rv_stride * 64)));
  for (int64_t g0 = r0; g0 < r1; g0 += group) {
    const int64_t rows = (g0 + group < r1 ? g0 + group : r1) - g0;
    const int rvs = static_cast<int>((rows + kLanes - 1) / kLanes);
    for (int rv = 0; rv < rvs; ++rv) {
      const int64_t first = g0 + rv * kLanes;
      const int n = static_cast<int>(rows - rv * kLanes < kLanes ? rows - rv * kLanes : kLanes);
      decode_row_vector(dec, w.codes + first, w.scales + first, n, w.k, panel + rv * rv_stride);
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

int64_t w4a16_gemm_input_words(int64_t m, int64_t k, int pieces, bool native_bf16) {
  return (m + kTileT - 1) / kTileT * kTileT * w4a16_token_words(k, pieces) * pair_dwords(!native_bf16);
}

void w4a16_gemm_pack_token(const float* x, int64_t t, int64_t k, int pieces, uint16_t* scratch, uint16_t* out,
                           bool native_bf16) {
  // The register kernel's packing (chunk c, vector v, piece p: dword i = block i's pair), then
  // the dwords reordered to token tile t / 6, [i][c][v][p], slot t % 6.
  w4a16_pack_token(x, k, pieces, scratch, native_bf16);
  const int64_t chunks = super_chunks(k);
  const auto* in = reinterpret_cast<const uint32_t*>(scratch);
  const int d = pair_dwords(!native_bf16);
  auto* o = reinterpret_cast<uint32_t*>(out) + t / kTileT * (kTileT * w4a16_token_words(k, pieces) / 2 * d) + t % kTileT;
  for (int64_t c = 0; c < chunks; ++c)
    for (int v = 0; v < kVectors; ++v)
      for (int p = 0; p < pieces; ++p)
        for (int i = 0; i < kLanes; ++i) {
          const uint32_t pair = in[((c * kVectors + v) * pieces + p) * kLanes + i];
          uint32_t* at = o + (((i * chunks + c) * kVectors + v) * pieces + p) * d * kTileT;
          if (d == 1) {
            at[0] = pair;
          } else {  // the odd half, then the even half, each as an fp32 (pair_dwords)
            at[0] = pair & 0xFFFF0000u;
            at[kTileT] = pair << 16;
          }
        }
}

int64_t w4a16_gemm_row_block(int64_t m, int64_t k) {
  return m >= kW4a16GemmMinTokens ? group_rows(k) : w4a16_row_block(m, k);
}

void w4a16_gemm_rows(const Rows& w, const uint16_t* xp, int64_t m, int pieces, int64_t r0, int64_t r1, void* y,
                     DType act, bool native_bf16) {
  const auto* x = reinterpret_cast<const uint32_t*>(xp);
  with_pieces_and_bf16(pieces, native_bf16, [&]<int P, bool E>() { gemm_rows_p<P, E>(w, x, m, r0, r1, y, act); });
}

}  // namespace fp4lm::kernels::cpu::avx512
