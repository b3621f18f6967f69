#pragma once
// The AMX kernel bodies, written once against the tile operations of amx_tiles.h and compiled
// twice: with the intrinsics (amx/nvfp4_w4a16.cpp, amx/dense.cpp; -mamx-*) and with the scalar
// emulation (amx_emulated_tables.cpp, portable; what the tests run on every CPU).
// docs/KERNELS.md, "AMX".
//
// Schedule of one call's rows [r0, r1) (a row block of RowSplitLinear): per panel of 32 output
// rows, the weights are decoded once into a panel (amx_panels.h), then every token tile pair
// runs over it: tiles 0-3 accumulate C (2 token tiles × 2 row halves, 16 × 16 fp32 each), 4-5
// hold the token tiles (16 tokens × 32 k of one activation piece), 6-7 the two weight tiles of
// the k step. Per k step: load both weight tiles, then per activation piece its token tiles and
// 2-4 TDPBF16PS. C is then stored and the epilogue applies y = fma(C, scale_r, bias_r) (NVFP4:
// the row's FP32 global scale; dense: 1) and the conversion to the act dtype.
//
// Edges: k is zero-padded to 32 in both operands (zero products), m to 16 in the activations
// (rows of C nobody stores), n to 32 in the panel (columns of C nobody stores). A (row, token)
// result is the same sequence of tile operations whatever m, the row range or the thread count:
// C's rows and columns never mix, so batch and thread invariance hold (on the hardware as far
// as it computes each C element the same way whatever the other rows hold, which the tests check).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "kernels/cpu/amx_panels.h"
#include "kernels/cpu/amx_tiles.h"

namespace fp4lm::kernels::cpu::amx {

// out[m_pad][32] = the activations of `in` times the panel's 32 rows (fp32 sums, see above).
template <class Tiles>
void gemm_panel(Tiles& t, const AmxInput& in, const uint16_t* panel, float* out) {
  const int64_t k_tiles = in.k_pad / kTileK;
  const int64_t xs = in.k_pad * 2;  // bytes between token rows
  const size_t plane = static_cast<size_t>(in.m_pad * in.k_pad);
  const uint16_t* b1 = panel + k_tiles * kTileElems;
  constexpr int64_t os = kPanelRows * 4;  // bytes between rows of out
  for (int64_t m0 = 0; m0 < in.m_pad; m0 += 32) {
    const bool two = m0 + 16 < in.m_pad;
    t.template zero<0>();
    t.template zero<1>();
    if (two) {
      t.template zero<2>();
      t.template zero<3>();
    }
    for (int64_t kt = 0; kt < k_tiles; ++kt) {
      t.template load<6>(panel + kt * kTileElems, kTileRowBytes);
      t.template load<7>(b1 + kt * kTileElems, kTileRowBytes);
      for (int p = 0; p < in.pieces; ++p) {
        const uint16_t* xa = in.x.data() + p * plane + m0 * in.k_pad + kt * kTileK;
        t.template load<4>(xa, xs);
        t.template dpbf16ps<0, 4, 6>();
        t.template dpbf16ps<1, 4, 7>();
        if (two) {
          t.template load<5>(xa + 16 * in.k_pad, xs);
          t.template dpbf16ps<2, 5, 6>();
          t.template dpbf16ps<3, 5, 7>();
        }
      }
    }
    float* o = out + m0 * kPanelRows;
    t.template store<0>(o, os);
    t.template store<1>(o + 16, os);
    if (two) {
      t.template store<2>(o + 16 * kPanelRows, os);
      t.template store<3>(o + 16 * kPanelRows + 16, os);
    }
  }
}

// y[t, r + j] = fma(out[t][j], scale[j], bias[j]) for j < rows, t < m (scale null: 1; bias null:
// none, the product alone), converted to `act`.
inline void store_panel(const float* out, int64_t m, int64_t n, int64_t r, int64_t rows, const float* scale,
                        const float* bias, void* y, DType act) {
  const size_t es = dtype_size(act);
  float v[kPanelRows];
  for (int64_t t = 0; t < m; ++t) {
    const float* o = out + t * kPanelRows;
    for (int64_t j = 0; j < rows; ++j) {
      const float s = scale ? o[j] * scale[j] : o[j];
      v[j] = bias ? (scale ? std::fma(o[j], scale[j], bias[j]) : o[j] + bias[j]) : s;
    }
    from_f32_n(v, act, static_cast<uint8_t*>(y) + static_cast<size_t>(t * n + r) * es, static_cast<size_t>(rows));
  }
}

// NVFP4 W4A16 rows [r0, r1) of every token (Nvfp4Kernels::a16_rows's contract).
template <class Tiles>
void nvfp4_w4a16_rows(const Nvfp4Matrix& w, const PreparedInput& pin, int64_t r0, int64_t r1, void* y, DType act) {
  const auto& in = static_cast<const AmxInput&>(pin);
  if (in.m == 0 || r0 >= r1) return;
  const int64_t k_tiles = in.k_pad / kTileK;
  uint16_t* panel = amx_thread_panel(static_cast<size_t>(2 * k_tiles * kTileElems));
  float* out = amx_thread_out(static_cast<size_t>(in.m_pad * kPanelRows));
  Tiles t;
  t.configure(full_tiles_config());
  for (int64_t r = r0; r < r1; r += kPanelRows) {
    const int64_t rows = std::min(kPanelRows, r1 - r);
    decode_nvfp4_panel(w, r, rows, panel);
    gemm_panel(t, in, panel, out);
    store_panel(out, in.m, w.n, r, rows, w.row_global.data() + r, w.bias.empty() ? nullptr : w.bias.data() + r, y, act);
  }
  t.release();
}

// Dense rows [r0, r1) whose weights are BF16 (the caller hands other rows elsewhere).
template <class Tiles>
void dense_bf16_rows(const DenseMatrix& w, const AmxInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  if (in.m == 0 || r0 >= r1) return;
  const int64_t k_tiles = in.k_pad / kTileK;
  uint16_t* panel = amx_thread_panel(static_cast<size_t>(2 * k_tiles * kTileElems));
  float* out = amx_thread_out(static_cast<size_t>(in.m_pad * kPanelRows));
  Tiles t;
  t.configure(full_tiles_config());
  for (int64_t r = r0; r < r1; r += kPanelRows) {
    const int64_t rows = std::min(kPanelRows, r1 - r);
    const uint16_t* ptrs[kPanelRows];
    for (int64_t j = 0; j < rows; ++j) {
      const DenseSegment* s = nullptr;
      for (const DenseSegment& seg : w.segments)
        if (r + j >= seg.row0 && r + j < seg.row0 + seg.rows) s = &seg;
      ptrs[j] = reinterpret_cast<const uint16_t*>(s->data) + (r + j - s->row0) * w.k;
    }
    repack_bf16_panel(ptrs, rows, w.k, panel);
    gemm_panel(t, in, panel, out);
    store_panel(out, in.m, w.n, r, rows, nullptr, w.bias.empty() ? nullptr : w.bias.data() + r, y, act);
  }
  t.release();
}

}  // namespace fp4lm::kernels::cpu::amx
