#pragma once
// The AVX2/FMA/F16C NVFP4 GEMM/GEMV kernels (nvfp4_w4a16.cpp, nvfp4_w4a4.cpp).
// Call only when cpu_features() reports avx2, fma and f16c (isa_support.cpp says); the
// ISA-neutral code reaches them through nvfp4_kernels_avx2() (nvfp4_kernels.h).
// Layout and inner loops: docs/KERNELS.md.
#include <cstdint>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/nvfp4_matrix.h"

namespace fp4lm::kernels::cpu {

// Rows per unit of parallel work (a multiple of every row tile of both kernels).
inline constexpr int64_t kNvfp4RowBlock = 24;

// ---- W4A16: x kept at 16-bit precision in integers: per 16-element block, int16 values with a
// shared power-of-two exponent (exact for every bf16 x within 2^7 of the block's largest |x|;
// the error bound is in docs/KERNELS.md), times the weights' 2 × E2M1 integers by vpmaddwd
// (exact int32 sums), block scales applied once per block sum; fp32 accumulation.
// float32 x takes two int16 pieces (the second the remainder × 2^15: 30 significant bits).
// Per token and 64-element chunk: pieces × 64 int16 (permuted to the decoder's order,
// zero-padded) and 8 fp32 lanes, lane d = 2^(e - 15) for block d/2 (e: the block's exponent).
struct W4a16Input {
  int64_t m = 0, k64 = 0;  // tokens, padded row length
  int pieces = 1;          // 2 for float32 activations
  std::vector<int16_t> q;
  std::vector<float> sa;  // NaN for a block holding NaN or ±inf (the token's outputs become NaN)
};
// A block's exponent e = max(floor(log2 max|x|), kW4a16ExpMin); x is represented as
// q · 2^(e - 14), |q| <= 32767. The floor keeps every scale product a normal fp32 number.
inline constexpr int kW4a16ExpMin = -75;
W4a16Input nvfp4_w4a16_input_avx2(const void* x, DType act, int64_t m, int64_t k, ThreadPool& pool);
// Rows per unit of parallel work for a call of m tokens.
int64_t nvfp4_w4a16_row_block_avx2(int64_t m, int64_t k);
// The row loop's operands as raw pointers into a Nvfp4Matrix and a W4a16Input (the loop is
// compiled for several instruction sets, avx2/nvfp4_w4a16_rows.h, and must not touch
// std::vector there).
struct W4a16Rows {
  const uint8_t* const* codes;   // [n]
  const uint8_t* const* scales;  // [n]
  const float* global;           // [n]
  const float* bias;             // [n] or nullptr
  int64_t n, k;
  const int16_t* q;  // W4a16Input::q
  const float* sa;   // W4a16Input::sa
  int64_t m, k64;
  int pieces;
};
W4a16Rows w4a16_rows_of(const Nvfp4Matrix& w, const W4a16Input& in);
// y[t, r] = x_t · W_rᵀ (+ bias) for rows [r0, r1), on the calling thread; y [m, n] in `act`.
void nvfp4_w4a16_rows_avx2(const W4a16Rows& a, int64_t r0, int64_t r1, void* y, DType act);
// The same bits with AVX-VNNI's vpdpwssd (avxvnni/nvfp4_w4a16.cpp): call only when the CPU has
// avx-vnni. nvfp4_w4a16_rows_vnni_twin: the same source with EVEX vpdpwssd (AVX512-VNNI + VL;
// avx512/nvfp4_w4a16_vnni_twin.cpp), so that the loop runs in tests on AVX-512 CPUs without
// AVX-VNNI; built with the AVX-512 kernels only (FP4LM_HAVE_AVX512_KERNELS).
void nvfp4_w4a16_rows_avxvnni(const W4a16Rows& a, int64_t r0, int64_t r1, void* y, DType act);
void nvfp4_w4a16_rows_vnni_twin(const W4a16Rows& a, int64_t r0, int64_t r1, void* y, DType act);

// ---- W4A4: x quantized at run time by the W4A4 rule (w.input_scale); block dot products in
// integer SIMD, exact; fp32 accumulation of block partial × (scale_a × scale_w).
// Per token and 64-element chunk c: q bytes [64c, 64c+32) are the chunk's even elements,
// [64c+32, 64c+64) its odd ones (matching the low and high nibbles of 32 weight code bytes); sa
// holds 8 floats per chunk, lane 2b and 2b + 1 the E4M3 scale of block 4c + b (the lanes of the
// loop's block sums, so it loads them as they are), and corr 8 int16 per chunk, lane d = -12 ×
// Σ 2a over the chunk's elements 8d..8d+7 (the loop's weights are 2w + 12, unsigned, so that
// vpmaddubsw takes them as they are; corr takes the 12 × Σ 2a back off). Padding is zero.
struct W4a4Input {
  int64_t m = 0, k64 = 0;
  std::vector<int8_t> q;  // 2a: the doubled E2M1 value, signed (|2a| <= 12)
  std::vector<float> sa;
  std::vector<int16_t> corr;
  std::vector<float> token_scale;  // [m] the input_scale each token was quantized with
};
// input_scale nullopt: each token with its own quant::dynamic_activation_scale. Throws Error on
// non-finite x.
W4a4Input nvfp4_w4a4_input_avx2(const void* x, DType act, int64_t m, int64_t k, std::optional<float> input_scale,
                                ThreadPool& pool);
// The W4A4 row loop's operands as raw pointers (see W4a16Rows; avx2/nvfp4_w4a4_rows.h).
struct W4a4Rows {
  const uint8_t* const* codes;   // [n]
  const uint8_t* const* scales;  // [n]
  const float* global;           // [n]
  const float* bias;             // [n] or nullptr
  int64_t n, k;
  const int8_t* q;            // W4a4Input::q
  const float* sa;            // W4a4Input::sa
  const int16_t* corr;        // W4a4Input::corr
  const float* token_scale;   // W4a4Input::token_scale
  int64_t m, k64;
};
W4a4Rows w4a4_rows_of(const Nvfp4Matrix& w, const W4a4Input& in);
void nvfp4_w4a4_rows_avx2(const W4a4Rows& a, int64_t r0, int64_t r1, void* y, DType act);
// The same bits with vpdpbusd: AVX-VNNI (call only when the CPU has avx-vnni) and its EVEX test
// twin (AVX512-VNNI + VL; built with the AVX-512 kernels only), as for W4A16 above.
void nvfp4_w4a4_rows_avxvnni(const W4a4Rows& a, int64_t r0, int64_t r1, void* y, DType act);
void nvfp4_w4a4_rows_vnni_twin(const W4a4Rows& a, int64_t r0, int64_t r1, void* y, DType act);

// The W4A4 kernel's activation quantizer, writing the standard layout (codes U8 [m, k/2],
// element 2j low nibble; E4M3 scales [m, k/16]); bit-identical to quant::quantize_activation.
// Throws Error on non-finite x or input_scale, or k % 16 != 0. For tests.
void quantize_activation_nvfp4_avx2(const float* x, int64_t m, int64_t k, float input_scale,
                                    uint8_t* codes, uint8_t* scales);

}  // namespace fp4lm::kernels::cpu
