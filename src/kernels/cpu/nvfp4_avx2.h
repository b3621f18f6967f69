#pragma once
// The AVX2/FMA/F16C NVFP4 GEMM/GEMV kernels (nvfp4_w4a16_avx2.cpp, nvfp4_w4a4_avx2.cpp).
// Call only when cpu_features() reports avx2, fma and f16c (nvfp4_backends.cpp checks).
// Layout and inner loops: docs/KERNELS.md.
#include <cstdint>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/nvfp4_matrix.h"

namespace fp4lm::kernels::cpu {

// y[m, n] = x[m, k] · Wᵀ (+ bias), x and y row-major in `act` (F32, BF16 or F16). x is used as
// is (never quantized); weights decoded on the fly; fp32 accumulation; parallel over rows of W.
void nvfp4_w4a16_avx2(const Nvfp4Matrix& w, const void* x, DType act, int64_t m, void* y,
                      ThreadPool& pool);

// The same with x quantized at run time by the W4A4 rule (w.input_scale); block dot products
// in integer SIMD, exact; fp32 accumulation of block partial × (scale_a × scale_w).
void nvfp4_w4a4_avx2(const Nvfp4Matrix& w, const void* x, DType act, int64_t m, void* y,
                     ThreadPool& pool);

// The W4A4 kernel's activation quantizer, writing the standard layout (codes U8 [m, k/2],
// element 2j low nibble; E4M3 scales [m, k/16]); bit-identical to quant::quantize_activation.
// Throws Error on non-finite x or input_scale, or k % 16 != 0. For tests.
void quantize_activation_nvfp4_avx2(const float* x, int64_t m, int64_t k, float input_scale,
                                    uint8_t* codes, uint8_t* scales);

}  // namespace fp4lm::kernels::cpu
