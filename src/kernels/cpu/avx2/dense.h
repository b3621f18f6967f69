#pragma once
// The AVX2/FMA/F16C dense (unquantized-weight) GEMM/GEMV (dense.cpp). Call only when
// cpu_features() reports avx2, fma and f16c. Layout and loops: docs/KERNELS.md.
#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "kernels/cpu/dense_matrix.h"

namespace fp4lm::kernels::cpu {

// x [m, k] in `act` -> fp32 rows of stride round_up(k, 8), zero-padded (the kernels' input).
std::vector<float> dense_input(const void* x, DType act, int64_t m, int64_t k);

// y[m, n] = x · Wᵀ (+ bias) for output rows [r0, r1) only, on the calling thread; xp from
// dense_input. Every (row, token) result is one fixed sequence of operations (8 fp32 lanes
// accumulated along k in order, then a fixed horizontal sum), whatever the tile, row range,
// thread count or the other tokens of the call.
void dense_rows_avx2(const DenseMatrix& w, const float* xp, int64_t m, int64_t r0, int64_t r1,
                     void* y, DType act);

// Rows per unit of parallel work (a multiple of every row tile).
inline constexpr int64_t kDenseRowBlock = 48;

}  // namespace fp4lm::kernels::cpu
