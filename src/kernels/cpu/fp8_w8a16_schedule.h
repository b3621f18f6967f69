#pragma once
// The FP8 W8A16 schedules, shared by the AVX2 and AVX-512 row kernels (and the int8 W8A16 one, whose
// decoder gives int8 values instead of E4M3 / 256). Include only from cpu/{avx2,avx512}/fp8_w8a16.cpp
// and cpu/avx2/int8_w8a16.cpp: everything here has internal linkage, so each ISA file compiles its own copy
// with its own flags (docs/KERNELS.md, "AVX-512 kernels").
//
// `Isa` (the ISA's row kernel, a struct of static members) provides:
//   X, Panel                the activation and the panel element types;
//   kChunk                  elements per decode step (16 or 32);
//   kTokTile, kRowsFor[T]   register schedule: tokens per tile, rows per tile of T tokens;
//   kWide[T], kOne[T]       register tiles (kRowsFor[T] rows / 1 row × T tokens) decoding in
//                           registers: (codes of the rows, k, x, x's token stride, out[rows][T]);
//   decode_row(codes, k, p) a row's E4M3 values / 256 as Panel, natural order, zero-padded to
//                           round_up(k, kChunk) (exactly what a tile decodes in registers);
//   kPanelMinTokens         calls of at least this many tokens use the panel schedule;
//   kPanelR, kPanelT        panel tile: rows × tokens;
//   kPanelWide[T], kPanelOne[T] tiles over decoded rows: (panel, its row stride, x, stride, out);
//   store(y, act, i, v)     one output element in the activation dtype.
// Both schedules feed each (row, token) accumulator the same FMAs in the same order, so they give
// bit-identical results and the panel threshold cannot break batch invariance.
#include "kernels/cpu/fp8_kernels.h"

namespace fp4lm::kernels::cpu {
namespace {

template <class Isa>
int64_t fp8_chunked(int64_t k) {
  return (k + Isa::kChunk - 1) / Isa::kChunk * Isa::kChunk;
}

// Rows per panel: about 512 KiB (it stays in L2 while all token tiles pass), a multiple of 12
// (3- and 4-row tiles) within [12, 96].
template <class Isa>
int64_t fp8_panel_rows(int64_t k) {
  const int64_t fit = (512 << 10) / (fp8_chunked<Isa>(k) * static_cast<int64_t>(sizeof(typename Isa::Panel)));
  return fit < 12 ? 12 : fit > 96 ? 96 : fit / 12 * 12;
}

template <class Isa>
int64_t fp8_row_block(int64_t m, int64_t k) {
  return m >= Isa::kPanelMinTokens ? fp8_panel_rows<Isa>(k) : kFp8RowBlock;
}

template <class Isa>
inline void fp8_epilogue(const Fp8Rows& w, int64_t r, int64_t t, float v, void* y, DType act) {
  Isa::store(y, act, t * w.n + r, v * w.scale256[r] + (w.bias ? w.bias[r] : 0.0f));
}

// Few tokens: kFp8RowBlock-row blocks whose codes stay in L1/L2 while the token tiles pass, each
// tile decoding its rows in registers.
template <class Isa>
void fp8_register_rows(const Fp8Rows& w, const typename Isa::X* x, int64_t kp, int64_t m, int64_t r0, int64_t r1,
                       void* y, DType act) {
  float out[4 * Isa::kTokTile];
  for (int64_t b0 = r0; b0 < r1; b0 += kFp8RowBlock) {
    const int64_t b1 = b0 + kFp8RowBlock < r1 ? b0 + kFp8RowBlock : r1;
    for (int64_t t0 = 0; t0 < m; t0 += Isa::kTokTile) {
      const int tt = static_cast<int>(m - t0 < Isa::kTokTile ? m - t0 : Isa::kTokTile);
      for (int64_t r = b0; r < b1;) {
        const int rr = r + Isa::kRowsFor[tt] <= b1 ? Isa::kRowsFor[tt] : 1;
        (rr > 1 ? Isa::kWide[tt] : Isa::kOne[tt])(w.codes + r, w.k, x + t0 * kp, kp, out);
        for (int i = 0; i < rr; ++i, ++r)
          for (int t = 0; t < tt; ++t) fp8_epilogue<Isa>(w, r, t0 + t, out[i * tt + t], y, act);
      }
    }
  }
}

// Many tokens: each group of rows is decoded once into a panel, then kPanelR × kPanelT
// register tiles run every token over it (decoding amortized over all m tokens).
template <class Isa>
void fp8_panel_rows_range(const Fp8Rows& w, const typename Isa::X* x, int64_t kp, int64_t m, int64_t r0, int64_t r1,
                          void* y, DType act) {
  using Panel = typename Isa::Panel;
  const int64_t kc = fp8_chunked<Isa>(w.k), group = fp8_panel_rows<Isa>(w.k);
  auto* panel = static_cast<Panel*>(fp8_thread_scratch(static_cast<size_t>(group * kc) * sizeof(Panel)));
  float out[Isa::kPanelR * Isa::kPanelT];
  for (int64_t g0 = r0; g0 < r1; g0 += group) {
    const int rows = static_cast<int>((g0 + group < r1 ? g0 + group : r1) - g0);
    for (int i = 0; i < rows; ++i) Isa::decode_row(w.codes[g0 + i], w.k, panel + i * kc);
    for (int64_t t0 = 0; t0 < m; t0 += Isa::kPanelT) {
      const int tt = static_cast<int>(m - t0 < Isa::kPanelT ? m - t0 : Isa::kPanelT);
      for (int i = 0; i < rows;) {
        const int rr = i + Isa::kPanelR <= rows ? Isa::kPanelR : 1;
        (rr > 1 ? Isa::kPanelWide[tt] : Isa::kPanelOne[tt])(panel + i * kc, kc, x + t0 * kp, kp, out);
        for (int ri = 0; ri < rr; ++ri, ++i)
          for (int t = 0; t < tt; ++t) fp8_epilogue<Isa>(w, g0 + i, t0 + t, out[ri * tt + t], y, act);
      }
    }
  }
}

// kp: x's token stride (in X elements).
template <class Isa>
void fp8_rows(const Fp8Rows& w, const typename Isa::X* x, int64_t kp, int64_t m, int64_t r0, int64_t r1, void* y,
              DType act) {
  if (m >= Isa::kPanelMinTokens)
    fp8_panel_rows_range<Isa>(w, x, kp, m, r0, r1, y, act);
  else
    fp8_register_rows<Isa>(w, x, kp, m, r0, r1, y, act);
}

}  // namespace
}  // namespace fp4lm::kernels::cpu
