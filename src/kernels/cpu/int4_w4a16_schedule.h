#pragma once
// The int4 W4A16 schedules, shared by the AVX2 and AVX-512 row kernels. Include only from
// avx2/int4_w4a16.cpp and avx512/int4_w4a16.cpp: everything here has internal linkage, so each ISA
// file compiles its own copy with its own flags (docs/KERNELS.md, "AVX-512 kernels").
//
// `Isa` provides: V (an fp32 vector), kLanes, kVecs = 16 / kLanes; zero(), set1(f), load(p),
// fmadd(a, b, c), hsum(v); decode16(codes, zero, scale, out[kVecs]): 16 weights (8 code bytes,
// column 2j in the low nibble) as (code - zero) × scale, exact but for the one rounding of the
// product; kRows, kToks (register tile); kPanelMinTokens; store(y, act, i, v).
//
// Register schedule (few tokens): a tile of kRows rows × up to kToks tokens decodes each group of
// 16 weights once in registers and feeds it to every token of the tile. Panel schedule (many
// tokens): a group of rows is decoded once into an fp32 panel that stays in L2, then the same
// tiles read it for every token. Both feed each (row, token) accumulator the same FMAs in the same
// order (per 16 columns, vector 0 then 1), so they are bit-identical: neither the panel threshold
// nor the row split can change a result.
#include "kernels/cpu/int4_matrix.h"

namespace fp4lm::kernels::cpu {
namespace {

constexpr int64_t kInt4RowBlock = 16;  // register schedule: rows per unit of work

// Rows per panel: about 256 KiB of fp32 weights, a multiple of 4 within [4, 64].
inline int64_t int4_panel_rows(int64_t k) {
  const int64_t fit = (256 << 10) / (k * 4);
  return fit < 4 ? 4 : fit > 64 ? 64 : fit / 4 * 4;
}

template <class Isa>
int64_t int4_row_block(int64_t m, int64_t k) {
  return m >= Isa::kPanelMinTokens ? int4_panel_rows(k) : kInt4RowBlock;
}

// R rows (codes / scales / zeros of row i at w.codes + (r0 + i) ...) × T tokens, decoding in
// registers; out[i * T + t].
template <class Isa, int R, int T>
void reg_tile(const Int4Rows& w, int64_t r0, const float* x, float* out) {
  using V = typename Isa::V;
  const int64_t groups = w.k / w.group, kb = w.k / 2;
  V acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = Isa::zero();
  for (int64_t g = 0; g < groups; ++g) {
    V z[R], s[R];
    for (int r = 0; r < R; ++r) {
      z[r] = Isa::set1(w.zeros[(r0 + r) * groups + g]);
      s[r] = Isa::set1(w.scales[(r0 + r) * groups + g]);
    }
    for (int64_t j = g * w.group; j < (g + 1) * w.group; j += 16) {
      for (int r = 0; r < R; ++r) {
        V wv[Isa::kVecs];
        Isa::decode16(w.codes + (r0 + r) * kb + j / 2, z[r], s[r], wv);
        for (int t = 0; t < T; ++t)
          for (int v = 0; v < Isa::kVecs; ++v)
            acc[r][t] = Isa::fmadd(wv[v], Isa::load(x + t * w.k + j + v * Isa::kLanes), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = Isa::hsum(acc[r][t]);
}

// reg_tile for Int4Rows::chunk128 matrices (Isa::decode128: 128 weights of a row from 64 code bytes
// through the (row, group)'s 16-entry table (code - zero) × scale); the same FMA sequence as
// panel_tile over a panel decoded by decode128.
template <class Isa, int R, int T>
void reg_tile128(const Int4Rows& w, int64_t r0, const float* x, float* out) {
  using V = typename Isa::V;
  const int64_t groups = w.k / w.group, kb = w.k / 2;
  V acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = Isa::zero();
  for (int64_t g = 0; g < groups; ++g) {
    V table[R];
    for (int r = 0; r < R; ++r)
      table[r] = Isa::table(w.zeros[(r0 + r) * groups + g], w.scales[(r0 + r) * groups + g]);
    for (int64_t j = g * w.group; j < (g + 1) * w.group; j += 128) {
      for (int r = 0; r < R; ++r) {
        V wv[8];
        Isa::decode128(w.codes + (r0 + r) * kb + j / 2, table[r], wv);
        for (int t = 0; t < T; ++t)
          for (int v = 0; v < 8; ++v) acc[r][t] = Isa::fmadd(wv[v], Isa::load(x + t * w.k + j + v * 16), acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = Isa::hsum(acc[r][t]);
}

// The same accumulation over R decoded panel rows (row stride k floats).
template <class Isa, int R, int T>
void panel_tile(const float* panel, int64_t k, const float* x, float* out) {
  using V = typename Isa::V;
  V acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = Isa::zero();
  for (int64_t j = 0; j < k; j += 16)
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t)
        for (int v = 0; v < Isa::kVecs; ++v)
          acc[r][t] = Isa::fmadd(Isa::load(panel + r * k + j + v * Isa::kLanes),
                                 Isa::load(x + t * k + j + v * Isa::kLanes), acc[r][t]);
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = Isa::hsum(acc[r][t]);
}

template <class Isa>
inline void int4_epilogue(const Int4Rows& w, int64_t r, int64_t t, float v, void* y, DType act) {
  Isa::store(y, act, t * w.n + r, v + (w.bias ? w.bias[r] : 0.0f));
}

// Tiles of R rows × T tokens (R = Isa::kRows, or 1 for the last rows) over rows [r0, r1), tokens
// [0, m); `tile(rows, r, t0, out)` computes one.
template <class Isa, class Tile>
void for_tiles(const Int4Rows& w, int64_t r0, int64_t r1, int64_t m, void* y, DType act, Tile&& tile) {
  float out[Isa::kRows * Isa::kToks];
  for (int64_t t0 = 0; t0 < m; t0 += Isa::kToks) {
    const int tt = static_cast<int>(m - t0 < Isa::kToks ? m - t0 : Isa::kToks);
    for (int64_t r = r0; r < r1;) {
      const int rr = r + Isa::kRows <= r1 ? Isa::kRows : 1;
      tile(rr, tt, r, t0, out);
      for (int i = 0; i < rr; ++i, ++r)
        for (int t = 0; t < tt; ++t) int4_epilogue<Isa>(w, r, t0 + t, out[i * tt + t], y, act);
    }
  }
}

template <class Isa, int R, int... Ts>
void dispatch_reg(int tt, const Int4Rows& w, int64_t r, const float* x, float* out) {
  ((tt == Ts ? reg_tile<Isa, R, Ts>(w, r, x, out) : void()), ...);
}
template <class Isa, int R, int... Ts>
void dispatch_reg128(int tt, const Int4Rows& w, int64_t r, const float* x, float* out) {
  if constexpr (Isa::kHasChunk128) ((tt == Ts ? reg_tile128<Isa, R, Ts>(w, r, x, out) : void()), ...);
}
template <class Isa, int R, int... Ts>
void dispatch_panel(int tt, const float* panel, int64_t k, const float* x, float* out) {
  ((tt == Ts ? panel_tile<Isa, R, Ts>(panel, k, x, out) : void()), ...);
}

template <class Isa>
void int4_rows(const Int4Rows& w, const float* x, int64_t m, int64_t r0, int64_t r1, void* y, DType act) {
  static_assert(Isa::kToks == 4);
  if (m < Isa::kPanelMinTokens) {
    for (int64_t b0 = r0; b0 < r1; b0 += kInt4RowBlock) {
      const int64_t b1 = b0 + kInt4RowBlock < r1 ? b0 + kInt4RowBlock : r1;
      for_tiles<Isa>(w, b0, b1, m, y, act, [&](int rr, int tt, int64_t r, int64_t t0, float* out) {
        if (w.chunk128)
          rr > 1 ? dispatch_reg128<Isa, Isa::kRows, 1, 2, 3, 4>(tt, w, r, x + t0 * w.k, out)
                 : dispatch_reg128<Isa, 1, 1, 2, 3, 4>(tt, w, r, x + t0 * w.k, out);
        else if (rr > 1)
          dispatch_reg<Isa, Isa::kRows, 1, 2, 3, 4>(tt, w, r, x + t0 * w.k, out);
        else
          dispatch_reg<Isa, 1, 1, 2, 3, 4>(tt, w, r, x + t0 * w.k, out);
      });
    }
    return;
  }
  const int64_t group = int4_panel_rows(w.k), groups = w.k / w.group;
  float* const panel = static_cast<float*>(int4_thread_scratch(static_cast<size_t>(group * w.k) * sizeof(float)));
  for (int64_t g0 = r0; g0 < r1; g0 += group) {
    const int64_t g1 = g0 + group < r1 ? g0 + group : r1;
    for (int64_t r = g0; r < g1; ++r) {  // decode each row once, exactly as the register tiles do
      float* dst = panel + (r - g0) * w.k;
      if constexpr (Isa::kHasChunk128)
        if (w.chunk128) {
          for (int64_t g = 0; g < groups; ++g) {
            const typename Isa::V table = Isa::table(w.zeros[r * groups + g], w.scales[r * groups + g]);
            for (int64_t j = g * w.group; j < (g + 1) * w.group; j += 128) {
              typename Isa::V wv[8];
              Isa::decode128(w.codes + r * (w.k / 2) + j / 2, table, wv);
              for (int v = 0; v < 8; ++v) Isa::storev(dst + j + v * 16, wv[v]);
            }
          }
          continue;
        }
      for (int64_t g = 0; g < groups; ++g) {
        const typename Isa::V z = Isa::set1(w.zeros[r * groups + g]), s = Isa::set1(w.scales[r * groups + g]);
        for (int64_t j = g * w.group; j < (g + 1) * w.group; j += 16) {
          typename Isa::V wv[Isa::kVecs];
          Isa::decode16(w.codes + r * (w.k / 2) + j / 2, z, s, wv);
          for (int v = 0; v < Isa::kVecs; ++v) Isa::storev(dst + j + v * Isa::kLanes, wv[v]);
        }
      }
    }
    for_tiles<Isa>(w, g0, g1, m, y, act, [&](int rr, int tt, int64_t r, int64_t t0, float* out) {
      const float* p = panel + (r - g0) * w.k;
      if (rr > 1)
        dispatch_panel<Isa, Isa::kRows, 1, 2, 3, 4>(tt, p, w.k, x + t0 * w.k, out);
      else
        dispatch_panel<Isa, 1, 1, 2, 3, 4>(tt, p, w.k, x + t0 * w.k, out);
    });
  }
}

}  // namespace
}  // namespace fp4lm::kernels::cpu
