#pragma once
// The AVX2/FMA/F16C NVFP4 GEMM/GEMV kernels (nvfp4_w4a16_avx2.cpp, nvfp4_w4a4_avx2.cpp).
// Call only when cpu_features() reports avx2, fma and f16c (cpu_isa_support.cpp says); the
// ISA-neutral code reaches them through nvfp4_kernels_avx2() (nvfp4_kernels.h).
// Layout and inner loops: docs/KERNELS.md.
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/nvfp4_matrix.h"

namespace fp4lm::kernels::cpu {

// Rows per unit of parallel work (a multiple of every row tile of both kernels).
inline constexpr int64_t kNvfp4RowBlock = 24;

// ---- W4A16: x is used as is (never quantized); weights decoded on the fly; fp32 accumulation.
// The call's activations in the kernel's layout (fp32, permuted to the decoder's order, padded).
struct W4a16Input {
  int64_t m = 0, kp = 0;  // tokens, padded row stride
  std::vector<float> x;
};
W4a16Input nvfp4_w4a16_input_avx2(const void* x, DType act, int64_t m, int64_t k, ThreadPool& pool);
// Calls with at least this many tokens decode each row group once into an fp32 panel and run
// register tiles over all tokens; fewer tokens decode in registers per tile. Same results.
inline constexpr int64_t kW4a16PanelMinTokens = 8;
// Rows per unit of parallel work for a call of m tokens (multiples of 6 in panel mode).
int64_t nvfp4_w4a16_row_block_avx2(int64_t m, int64_t k);
// y[t, r] = x_t · W_rᵀ (+ bias) for rows [r0, r1), on the calling thread; y [m, n] in `act`.
void nvfp4_w4a16_rows_avx2(const Nvfp4Matrix& w, const W4a16Input& in, int64_t r0, int64_t r1,
                           void* y, DType act);

// ---- W4A4: x quantized at run time by the W4A4 rule (w.input_scale); block dot products in
// integer SIMD, exact; fp32 accumulation of block partial × (scale_a × scale_w).
// Per token and 64-element chunk c: mag/sgn bytes [64c, 64c+32) are the chunk's even elements,
// [64c+32, 64c+64) its odd ones (matching the low and high nibbles of 32 weight code bytes); sa
// holds 8 floats per chunk, lane l = the E4M3 scale of block 4c + l/2. Padding is zero.
struct W4a4Input {
  int64_t m = 0, k64 = 0;
  std::vector<uint8_t> mag;  // |2a|
  std::vector<int8_t> sgn;   // 2a (only its sign is used)
  std::vector<float> sa;
};
// Throws Error on non-finite x.
W4a4Input nvfp4_w4a4_input_avx2(const void* x, DType act, int64_t m, int64_t k, float input_scale,
                                ThreadPool& pool);
void nvfp4_w4a4_rows_avx2(const Nvfp4Matrix& w, const W4a4Input& in, int64_t r0, int64_t r1, void* y,
                          DType act);

// The W4A4 kernel's activation quantizer, writing the standard layout (codes U8 [m, k/2],
// element 2j low nibble; E4M3 scales [m, k/16]); bit-identical to quant::quantize_activation.
// Throws Error on non-finite x or input_scale, or k % 16 != 0. For tests.
void quantize_activation_nvfp4_avx2(const float* x, int64_t m, int64_t k, float input_scale,
                                    uint8_t* codes, uint8_t* scales);

}  // namespace fp4lm::kernels::cpu
