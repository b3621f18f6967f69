#pragma once
// The operands of the AMX bf16 GEMM (ISA-neutral, portable): activations as bf16 pieces, weight
// panels in the tile layout TDPBF16PS reads. docs/KERNELS.md, "AMX".
//
// Activations (AmxInput): x [m, k] in the act dtype becomes `pieces` bf16 matrices [m_pad, k_pad]
// (m_pad a multiple of 16, k_pad of 32, zero-padded) whose sum is x exactly: bf16 x is one piece;
// f16 x two (the top 8 significant bits, then the rest: f16 has 11); f32 x three (8 + 8 + 8 bits).
// Each piece is the float truncated to bf16 and the remainder is exact, so x = Σ pieces exactly
// wherever every piece is a normal bf16 or zero (|x| ≥ 2^-110 or so for f32; always for f16, bf16).
//
// Weight panel: 32 output rows [r, r + 32) (rows past the layer's end zero) × k_pad, as two
// halves (rows r..r+15, r+16..r+31) of k_pad/32 tiles each, tile (h, kt) at panel + (h · k_tiles +
// kt) · 512 uint16: 16 tile rows of 64 bytes, tile row i holding for output row n (0-15) the
// pair W[n][kt·32 + 2i], W[n][kt·32 + 2i + 1] at uint16 2n, 2n + 1 (the "VNNI" layout of B).
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/dense_matrix.h"
#include "kernels/cpu/nvfp4_matrix.h"
#include "kernels/cpu/row_split_linear.h"

namespace fp4lm::kernels::cpu::amx {

inline constexpr int64_t kPanelRows = 32;  // output rows per weight panel (two B tiles)
inline constexpr int64_t kTileK = 32;      // k per tile (16 pairs of bf16)
inline constexpr int64_t kTileElems = 512; // uint16 per tile (16 × 64 bytes)

inline int64_t padded_k(int64_t k) { return (k + kTileK - 1) / kTileK * kTileK; }
inline int64_t padded_m(int64_t m) { return (m + 15) / 16 * 16; }

struct AmxInput : PreparedInput {
  int64_t k = 0, m_pad = 0, k_pad = 0;
  int pieces = 1;
  std::vector<uint16_t> x;  // [pieces][m_pad][k_pad] bf16 bits
  // Another table's input for the same call, where a kernel hands some rows to it (dense F32/F16
  // weight rows); null otherwise.
  std::unique_ptr<PreparedInput> fallback;
};

// Pieces per activation dtype: BF16 1, F16 2, F32 3.
int amx_pieces(DType act);
// x [m, k] in `act` as bf16 pieces (above).
std::unique_ptr<AmxInput> make_amx_input(const void* x, DType act, int64_t m, int64_t k);

// Rows [r, r + rows) (rows <= 32) of an NVFP4 matrix as a weight panel of exact bf16 values:
// e2m1 × E4M3 block scale has at most 6 significant bits and lies in [2^-10, 2688], so it is a
// bf16 exactly (the per-row FP32 global scale stays for the epilogue). `panel` holds
// 2 · padded_k(w.k) / 32 tiles.
void decode_nvfp4_panel(const Nvfp4Matrix& w, int64_t r, int64_t rows, uint16_t* panel);

// Rows [r, r + rows) of BF16 weight rows (row_ptr(i) -> k bf16 values of row r + i) as a panel.
void repack_bf16_panel(const uint16_t* const* rows_ptr, int64_t rows, int64_t k, uint16_t* panel);

// A thread's reusable buffer of at least `count` elements (the panel, the tile outputs).
uint16_t* amx_thread_panel(size_t count);
float* amx_thread_out(size_t count);

}  // namespace fp4lm::kernels::cpu::amx
