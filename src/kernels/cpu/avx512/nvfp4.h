#pragma once
// The AVX-512 NVFP4 kernels (nvfp4_w4a16*.cpp, nvfp4_w4a4*.cpp): raw-pointer entry
// points only. Everything that allocates, throws or uses the thread pool lives in the
// ISA-neutral nvfp4_table.cpp, so no template or inline function shared with other
// files is ever instantiated with AVX-512 code (the linker could otherwise pick that copy for
// the whole program and crash an AVX2-only CPU). Call only when the backend's
// unavailable_reason() is "" (nvfp4_backends.cpp). Layout and loops: docs/KERNELS.md.
#include <cstdint>

#include "core/dtype.h"

namespace fp4lm::kernels::cpu::avx512 {

// Elements per super-chunk: 16 blocks, 128 code bytes, 16 scale bytes. One zmm lane per block.
inline constexpr int64_t kSuper = 256;
inline int64_t super_chunks(int64_t k) { return (k + kSuper - 1) / kSuper; }

// A layer's rows as the kernels read them (pointers into the checkpoint's own layout).
struct Rows {
  const uint8_t* const* codes;   // [n] -> k/2 bytes
  const uint8_t* const* scales;  // [n] -> k/16 E4M3 bytes
  const float* global;           // [n]
  const float* bias;             // [n] or nullptr
  int64_t n, k;
};

// Thread-local scratch of at least `bytes`, 64-byte aligned (nvfp4_table.cpp).
void* thread_scratch(size_t bytes);

// ---- W4A16. x is split into `pieces` bf16 terms whose sum is x exactly (bf16: 1, f16: 2,
// f32: 3; parts below 2^-126 are dropped, as vdpbf16ps treats bf16 denormals as zero).
// `native_bf16`: the AVX512-BF16 instructions; false on a CPU without them (Ice Lake): the same
// arithmetic from AVX-512F (common.h, dot_bf16 / cvt2_bf16). Pack and multiply with the same flag.
// Per token: super_chunks(k) × 8 vectors × pieces × 32 bf16 (uint16), zero-padded.
int64_t w4a16_token_words(int64_t k, int pieces);
// One token: fp32 x [k] -> `out` [w4a16_token_words(k, pieces)], 64-byte aligned.
void w4a16_pack_token(const float* x, int64_t k, int pieces, uint16_t* out, bool native_bf16);
// Calls with at least this many tokens decode each row group once into a panel. Below, register
// tiles re-decode each super-chunk (2 rows × 4 tokens, or 1 row × 8 tokens for rows up to 2048
// wide, share one decode: common.h, kWideTokTile); measured per
// core at 4096², register vs panel: m = 8 99 vs 66, m = 12 90 vs 78, m = 16 ~90 both, m = 24
// 93 vs 103 G multiply-adds/s (kernel_core_bench, loaded machine).
inline constexpr int64_t kW4a16PanelMinTokens = 16;
int64_t w4a16_row_block(int64_t m, int64_t k);
// y[t, r] for rows [r0, r1) and tokens [0, m); y [m, n] in `act`.
void w4a16_rows(const Rows& w, const uint16_t* xp, int64_t m, int pieces, int64_t r0, int64_t r1,
                void* y, DType act, bool native_bf16);

// ---- W4A16 GEMM (nvfp4_w4a16_gemm.cpp): the same results as w4a16_rows, bit for bit, for any
// m (batch invariance: m picks the schedule); from kW4a16GemmMinTokens tokens a register-blocked
// kernel over rows decoded once per call, below it w4a16_rows. Tokens packed by
// w4a16_gemm_pack_token when m >= kW4a16GemmMinTokens, else by w4a16_pack_token.
// From 64 tokens its decode (16 rows transposed per super-chunk) is paid back; per core
// (kernel_core_bench, loaded 2-core Zen 4, thread CPU time), w4a16_rows vs GEMM in G
// multiply-adds/s: 4096², m = 16 67.8 vs 57.9, 32 72.3 vs 70.4, 48 75.2 vs 75.8, 256 79.9 vs 91.3;
// 4096 × 14336: m = 48 74.3 vs 72.0, 64 76.8 vs 76.6, 96 78.2 vs 83.5.
inline constexpr int64_t kW4a16GemmMinTokens = 64;
// The call's packed activations: tiles of 6 tokens (the last zero-padded), in words (twice as
// many without native BF16: each pair pre-split into two fp32).
int64_t w4a16_gemm_input_words(int64_t m, int64_t k, int pieces, bool native_bf16);
// Token t into `out` (the call's buffer, zeroed first); `scratch`: w4a16_token_words(k, pieces)
// words, 64-byte aligned.
void w4a16_gemm_pack_token(const float* x, int64_t t, int64_t k, int pieces, uint16_t* scratch, uint16_t* out,
                           bool native_bf16);
int64_t w4a16_gemm_row_block(int64_t m, int64_t k);
// m >= kW4a16GemmMinTokens only (smaller calls: w4a16_rows).
void w4a16_gemm_rows(const Rows& w, const uint16_t* xp, int64_t m, int pieces, int64_t r0, int64_t r1, void* y,
                     DType act, bool native_bf16);

// ---- W4A4. The activation codes come from the W4A4 quantizer (standard packed layout, codes
// [k/2] and E4M3 scales [k/16] per token, bit-identical to quant::quantize_activation).
// Per token and super-chunk: 256 signed bytes 2·a (4 vectors), 16 int32 = -12 × Σ 2·a per
// block, 16 fp32 activation block scales: 384 bytes.
int64_t w4a4_token_bytes(int64_t k);
void w4a4_pack_token(const uint8_t* codes, const uint8_t* scales, int64_t k, uint8_t* out);
// From 16 tokens the decoded panel is as fast as re-decoding per 4-token tile (per core, 4096²,
// register vs panel: m = 12 123 vs 106, m = 16 ~118 both, m = 24 123 vs 140 G MAC/s; session 3
// measured 12 as the crossover with slower tiles).
inline constexpr int64_t kW4a4PanelMinTokens = 16;
int64_t w4a4_row_block(int64_t m, int64_t k);
// alpha per (row, token) = token_scale[t] × global[r] (the kernel applies its own constant
// factors); token_scale [m]: the input_scale each token was quantized with.
void w4a4_rows(const Rows& w, const float* token_scale, const uint8_t* xp, int64_t m, int64_t r0, int64_t r1,
               void* y, DType act);

// ---- W4A4 GEMM (nvfp4_w4a4_gemm.cpp): w4a4_rows' results bit for bit, for m >=
// kW4a4GemmMinTokens (smaller calls: w4a4_rows), in the W4A16 GEMM's rows-in-lanes form.
// Its decode is cheaper than the W4A16 GEMM's (4 byte vectors + scales per super-chunk): per core
// (kernel_core_bench, loaded Zen 4), w4a4_rows vs GEMM in G multiply-adds/s at 4096²: m = 16 70.3
// vs 77.9, 24 81.8 vs 91.6, 32 81.0 vs 95.9; 4096 × 14336: m = 16 73.9 vs 72.7, 24 80.5 vs 85.5.
inline constexpr int64_t kW4a4GemmMinTokens = 24;
// The call's packed activations: tiles of 6 tokens (the last zero-padded), in bytes.
int64_t w4a4_gemm_input_bytes(int64_t m, int64_t k);
// Token t (codes, scales as for w4a4_pack_token) into `out` (the call's buffer, zeroed first);
// `scratch`: w4a4_token_bytes(k), 64-byte aligned.
void w4a4_gemm_pack_token(const uint8_t* codes, const uint8_t* scales, int64_t t, int64_t k, uint8_t* scratch,
                          uint8_t* out);
int64_t w4a4_gemm_row_block(int64_t m, int64_t k);
void w4a4_gemm_rows(const Rows& w, const float* token_scale, const uint8_t* xp, int64_t m, int64_t r0, int64_t r1,
                    void* y, DType act);

}  // namespace fp4lm::kernels::cpu::avx512
