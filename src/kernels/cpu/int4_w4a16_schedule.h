#pragma once
// The int4 W4A16 schedules of the row kernels that run what the repacked layout (int4_packed.h)
// does not: AVX2 with groups that are not multiples of 32. Include only from avx2/int4_w4a16.cpp:
// everything here has internal linkage, compiled with that file's flags (docs/KERNELS.md, "int4
// W4A16").
//
// The scale and zero point stay out of the inner loop: per (row, group) the products of the
// unscaled codes (code - zero, exact small integers) with x are summed into a partial that starts
// from zero, then the partial is multiplied by the group's scale into the row's accumulator. The
// partials of different groups are independent chains (the out-of-order core overlaps them; one
// accumulator per (row, token) fed once per group instead of once per 16 weights), which is what
// lets one row at a time run at the memory roofline. Numerics: not the products of fp32-rounded
// weights but Σ scale × Σ (code - zero) × x, within the same fp64 bound (int4_cpu_kernels_test).
//
// decode16: 16 weights (8 code bytes, column 2j in the low nibble) as code - zero in fp32.
//
// `Isa` provides: V (an fp32 vector), kLanes, kVecs = 16 / kLanes; zero(), set1(f), load(p),
// storev(p, v), add(a, b), fmadd(a, b, c), hsum(v); decode16(codes, zero, out[kVecs]); kRowsFor(tokens)
// (register tile rows); kPanelMinTokens; store(y, act, i, v).
//
// Register schedule (few tokens): a tile of R rows × up to 4 tokens decodes each step once in
// registers and feeds it to every token of the tile. Panel schedule (many tokens): a group of rows
// is decoded once into an fp32 panel that stays in L2, then the same tiles read it for every token.
// Both feed each (row, token) the same operations in the same order, so they are bit-identical:
// neither the panel threshold nor the row split nor the tile shape can change a result.
#include <xmmintrin.h>

#include "kernels/cpu/int4_matrix.h"

namespace fp4lm::kernels::cpu {
namespace {

constexpr int64_t kInt4RowBlock = 16;  // register schedule: rows per unit of work
constexpr int kInt4Toks = 4;           // tokens per register tile
constexpr int64_t kInt4PrefetchBytes = 2048;  // software prefetch distance along a row's codes

// Rows per panel: about 256 KiB of decoded weights, a multiple of 4 within [4, 64].
inline int64_t int4_panel_rows(int64_t k) {
  const int64_t fit = (256 << 10) / (k * 4);  // fp32 panels
  return fit < 4 ? 4 : fit > 64 ? 64 : fit / 4 * 4;
}

template <class Isa>
int64_t int4_row_block(int64_t m, int64_t k) {
  return m >= Isa::kPanelMinTokens ? int4_panel_rows(k) : kInt4RowBlock;
}

// Prefetch into L2 the code line kInt4PrefetchBytes ahead (into the next rows once a row ends:
// rows are contiguous); a prefetch never faults.
inline void int4_prefetch(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p + kInt4PrefetchBytes), _MM_HINT_T1);
}

// ---- decode16 form. The (row, token) step over one group: `wv(r, j, out)` gives the decoded
// (code - zero) vectors of row r at column j (from codes or a panel).
template <class Isa, int R, int T, class Decoded>
void group_steps(const Int4Rows& w, int64_t r0, const float* x, float* out, Decoded&& wv_of) {
  using V = typename Isa::V;
  const int64_t groups = w.groups;
  V acc[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) acc[r][t] = Isa::zero();
  for (int64_t g = 0; g < groups; ++g) {
    V part[R][T][Isa::kVecs];  // one chain per vector of a step: half the dependency depth on AVX2
    for (int r = 0; r < R; ++r)
      for (int t = 0; t < T; ++t)
        for (int v = 0; v < Isa::kVecs; ++v) part[r][t][v] = Isa::zero();
    for (int64_t j = g * w.group; j < (g + 1) * w.group; j += 16) {
      for (int r = 0; r < R; ++r) {
        V wv[Isa::kVecs];
        wv_of(r, g, j, wv);
        for (int t = 0; t < T; ++t)
          for (int v = 0; v < Isa::kVecs; ++v)
            part[r][t][v] = Isa::fmadd(wv[v], Isa::load(x + t * w.k + j + v * Isa::kLanes), part[r][t][v]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const V s = Isa::set1(w.scales[(r0 + r) * groups + g]);
      for (int t = 0; t < T; ++t) {
        V sum = part[r][t][0];
        for (int v = 1; v < Isa::kVecs; ++v) sum = Isa::add(sum, part[r][t][v]);
        acc[r][t] = Isa::fmadd(sum, s, acc[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = Isa::hsum(acc[r][t]);
}

template <class Isa, int R, int T>
void reg_tile(const Int4Rows& w, int64_t r0, const float* x, float* out) {
  const int64_t groups = w.groups, kb = w.k >> 1;
  group_steps<Isa, R, T>(w, r0, x, out, [&](int r, int64_t g, int64_t j, typename Isa::V* wv) {
    const uint8_t* p = w.codes + (r0 + r) * kb + j / 2;
    if (j % 128 == 0) int4_prefetch(p);
    Isa::decode16(p, Isa::set1(w.zeros[(r0 + r) * groups + g]), wv);
  });
}

template <class Isa, int R, int T>
void panel_tile(const Int4Rows& w, int64_t r0, const float* panel, const float* x, float* out) {
  group_steps<Isa, R, T>(w, r0, x, out, [&](int r, int64_t, int64_t j, typename Isa::V* wv) {
    for (int v = 0; v < Isa::kVecs; ++v) wv[v] = Isa::load(panel + r * w.k + j + v * Isa::kLanes);
  });
}

template <class Isa>
void decode_panel_row(const Int4Rows& w, int64_t r, float* dst) {
  const int64_t groups = w.groups;
  for (int64_t g = 0; g < groups; ++g) {
    const typename Isa::V z = Isa::set1(w.zeros[r * groups + g]);
    for (int64_t j = g * w.group; j < (g + 1) * w.group; j += 16) {
      typename Isa::V wv[Isa::kVecs];
      Isa::decode16(w.codes + r * (w.k / 2) + j / 2, z, wv);
      for (int v = 0; v < Isa::kVecs; ++v) Isa::storev(dst + j + v * Isa::kLanes, wv[v]);
    }
  }
}

// ---- Schedules.
template <class Isa>
inline void int4_epilogue(const Int4Rows& w, int64_t r, int64_t t, float v, void* y, DType act) {
  Isa::store(y, act, t * w.n + r, v + (w.bias ? w.bias[r] : 0.0f));
}

// Tiles of rr rows × tt tokens over rows [r0, r1), tokens [0, m) (rr = Isa::kRowsFor(tt), or 1 for
// the last rows); `tile(rr, tt, r, t0, out)` computes one.
template <class Isa, class Tile>
void for_tiles(const Int4Rows& w, int64_t r0, int64_t r1, int64_t m, void* y, DType act, Tile&& tile) {
  float out[8 * kInt4Toks];
  for (int64_t t0 = 0; t0 < m; t0 += kInt4Toks) {
    const int tt = static_cast<int>(m - t0 < kInt4Toks ? m - t0 : kInt4Toks);
    for (int64_t r = r0; r < r1;) {
      const int rr = r + Isa::kRowsFor(tt) <= r1 ? Isa::kRowsFor(tt) : 1;
      tile(rr, tt, r, t0, out);
      for (int i = 0; i < rr; ++i, ++r)
        for (int t = 0; t < tt; ++t) int4_epilogue<Isa>(w, r, t0 + t, out[i * tt + t], y, act);
    }
  }
}

// The tile function for rr rows × tt tokens: Tile<Isa, R, T> for R in {1, kRowsFor(tt)}.
template <class Isa, template <class, int, int> class Fn, class... Args>
void dispatch(int rr, int tt, Args&&... args) {
  constexpr int R1 = Isa::kRowsFor(1), R2 = Isa::kRowsFor(2), R3 = Isa::kRowsFor(3), R4 = Isa::kRowsFor(4);
  switch (tt * 2 + (rr > 1)) {
    case 2: return Fn<Isa, 1, 1>::run(args...);
    case 3: return Fn<Isa, R1, 1>::run(args...);
    case 4: return Fn<Isa, 1, 2>::run(args...);
    case 5: return Fn<Isa, R2, 2>::run(args...);
    case 6: return Fn<Isa, 1, 3>::run(args...);
    case 7: return Fn<Isa, R3, 3>::run(args...);
    case 8: return Fn<Isa, 1, 4>::run(args...);
    default: return Fn<Isa, R4, 4>::run(args...);
  }
}
template <class Isa, int R, int T>
struct RegTile {
  static void run(const Int4Rows& w, int64_t r, const float* x, float* out) { reg_tile<Isa, R, T>(w, r, x, out); }
};
template <class Isa, int R, int T>
struct PanelTile {
  static void run(const Int4Rows& w, int64_t r, const float* panel, const float* x, float* out) {
    panel_tile<Isa, R, T>(w, r, panel, x, out);
  }
};

// x: [m, k] fp32 in the codes' column order.
template <class Isa>
void int4_rows(const Int4Rows& w, const float* x, int64_t m, int64_t r0, int64_t r1, void* y, DType act) {
  if (m < Isa::kPanelMinTokens) {
    for (int64_t b0 = r0; b0 < r1; b0 += kInt4RowBlock) {
      const int64_t b1 = b0 + kInt4RowBlock < r1 ? b0 + kInt4RowBlock : r1;
      for_tiles<Isa>(w, b0, b1, m, y, act, [&](int rr, int tt, int64_t r, int64_t t0, float* out) {
        dispatch<Isa, RegTile>(rr, tt, w, r, x + t0 * w.k, out);
      });
    }
    return;
  }
  const int64_t row_floats = w.k;
  const int64_t group = int4_panel_rows(w.k);
  const size_t panel_bytes = static_cast<size_t>(group * row_floats) * sizeof(float);
  float* const panel = static_cast<float*>(int4_thread_scratch(panel_bytes));
  for (int64_t g0 = r0; g0 < r1; g0 += group) {
    const int64_t g1 = g0 + group < r1 ? g0 + group : r1;
    // Each row decoded once, exactly as the register tiles do.
    for (int64_t r = g0; r < g1; ++r) decode_panel_row<Isa>(w, r, panel + (r - g0) * row_floats);
    for_tiles<Isa>(w, g0, g1, m, y, act, [&](int rr, int tt, int64_t r, int64_t t0, float* out) {
      dispatch<Isa, PanelTile>(rr, tt, w, r, panel + (r - g0) * row_floats, x + t0 * w.k, out);
    });
  }
}

}  // namespace
}  // namespace fp4lm::kernels::cpu
