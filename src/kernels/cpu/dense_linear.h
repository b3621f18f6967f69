#pragma once
// The Linear kernel of the CPU dense backends (ISA-neutral): unquantized F32/BF16/F16 weights
// in place, computed by one ISA's kernel table (dense_kernels.h).
#include "kernels/cpu/dense_kernels.h"
#include "kernels/cpu/dense_matrix.h"
#include "kernels/cpu/row_split_linear.h"

namespace fp4lm::kernels::cpu {

class DenseLinear final : public RowSplitLinear {
 public:
  // Throws Error on inconsistent weights or an unsupported activation dtype. `isa` must outlive
  // the kernel (the tables are static).
  DenseLinear(LinearWeights w, const LinearProblem& p, const DenseKernels& isa);

  int64_t row_block(int64_t m) const override;
  std::unique_ptr<PreparedInput> prepare(const void* x, int64_t m, bool force_a16,
                                         ThreadPool& pool) const override;
  void run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const override;
  size_t weight_bytes() const override { return w_.weight_bytes; }

 private:
  DenseMatrix w_;
  DType act_;
  const DenseKernels& isa_;
};

}  // namespace fp4lm::kernels::cpu
