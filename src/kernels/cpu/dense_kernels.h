#pragma once
// One instruction set's dense (unquantized-weight) kernels as a table of functions: the
// ISA-neutral DenseLinear calls kernels only through it; a backend's registration chooses the
// table (backend_factory.h). Layouts and inner loops: docs/KERNELS.md.
#include "kernels/cpu/dense_matrix.h"
#include "kernels/cpu/table_linear.h"

namespace fp4lm::kernels::cpu {

using DenseKernels = KernelTable<DenseMatrix>;
// The Linear kernel of the dense backends: unquantized F32/BF16/F16 weights in place.
using DenseLinear = TableLinear<DenseMatrix>;

const DenseKernels& dense_kernels_avx2();    // avx2/dense_table.cpp
const DenseKernels& dense_kernels_avx512();  // avx512/dense_table.cpp

}  // namespace fp4lm::kernels::cpu
