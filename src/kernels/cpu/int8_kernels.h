#pragma once
// The int8 W8A16 kernels (ModelOpt W8A16 and, behind model::Linear's int8 activation pass,
// W8A8_SQ_PER_CHANNEL): int8 weights with one scale per output row, activations used as they are,
// fp32 accumulation. The prepared form is the FP8 kernels' Fp8Matrix (codes in place + a row scale;
// row_scale256 then holds the plain weight_scale: int8 decodes to its own value), and the loops are
// the FP8 W8A16 schedules (fp8_w8a16_schedule.h) with an int8 decoder (cpu/avx2/int8_w8a16.cpp).
// docs/KERNELS.md, "int8 W8A16".
#include <cstdint>

#include "kernels/cpu/fp8_kernels.h"

namespace fp4lm::kernels::cpu {

using Int8Kernels = KernelTable<Fp8Matrix>;
using Int8Linear = TableLinear<Fp8Matrix>;

// Call only when its backend's unavailable_reason() is "" (int8_tables.cpp).
const Int8Kernels& int8_kernels_avx2();

// Throws fp4lm::Error naming the shard on inconsistent weights (kernels/cpu/reference/math.h,
// check_int8_weights), a bias of the wrong length, or a layer that is not int8 (int8_matrix.cpp).
Fp8Matrix prepare_int8_matrix(LinearWeights w);

// y[t, r] = x_t · W_rᵀ (+ bias) for rows [r0, r1) and tokens [0, m); x fp32 with row stride kp (a
// multiple of 32, zero-padded); w.scale256 is the plain per-row weight_scale. The FP8 AVX2
// schedules: each (row, token) result is one fixed sequence of FMAs whatever the tile, the
// schedule, the row range, the thread count or the other tokens.
int64_t int8_w8a16_row_block_avx2(int64_t m, int64_t k);
void int8_w8a16_rows_avx2(const Fp8Rows& w, const float* x, int64_t kp, int64_t m, int64_t r0, int64_t r1, void* y,
                          DType act);

}  // namespace fp4lm::kernels::cpu
