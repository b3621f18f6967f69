#pragma once
// One instruction set's dense (unquantized-weight) kernels as a table of functions: the
// ISA-neutral DenseLinear calls kernels only through it; a backend's registration chooses the
// table (cpu_backend_factory.h). Layouts and inner loops: docs/KERNELS.md.
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "kernels/cpu/dense_matrix.h"
#include "kernels/cpu/row_split_linear.h"

namespace fp4lm::kernels::cpu {

struct DenseKernels {
  const char* isa = "";
  // x [m, k] in `act` -> the call's activations in the kernel's layout.
  std::unique_ptr<PreparedInput> (*input)(const void* x, DType act, int64_t m, int64_t k) = nullptr;
  int64_t (*row_block)(int64_t m) = nullptr;
  // y[m, n] = x · Wᵀ (+ bias) for output rows [r0, r1) only, on the calling thread.
  void (*rows)(const DenseMatrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y,
               DType act) = nullptr;
};

const DenseKernels& dense_kernels_avx2();    // dense_kernels_avx2.cpp
const DenseKernels& dense_kernels_avx512();  // dense_kernels_avx512.cpp

}  // namespace fp4lm::kernels::cpu
