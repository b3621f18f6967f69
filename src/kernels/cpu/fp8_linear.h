#pragma once
// The FP8 W8A16 Linear kernel of the CPU backends `cpu_fp8_w8a16_avx2` / `_avx512`: one prepared
// Fp8Matrix (the checkpoint's codes in place), activations used as they are (never quantized).
#include "kernels/cpu/fp8_kernels.h"
#include "kernels/cpu/row_split_linear.h"

namespace fp4lm::kernels::cpu {

class Fp8Linear final : public RowSplitLinear {
 public:
  // Throws Error on inconsistent weights or an unsupported activation dtype.
  Fp8Linear(LinearWeights w, const LinearProblem& p, const Fp8Kernels& isa);

  int64_t row_block(int64_t m) const override;
  std::unique_ptr<PreparedInput> prepare(const void* x, int64_t m, bool force_a16,
                                         ThreadPool& pool) const override;
  void run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const override;
  size_t weight_bytes() const override { return w_.weight_bytes; }

 private:
  Fp8Matrix w_;
  DType act_;
  const Fp8Kernels& isa_;
};

}  // namespace fp4lm::kernels::cpu
