#pragma once
// The NVFP4 Linear kernel of the CPU backends (ISA-neutral): one prepared Nvfp4Matrix serving
// W4A16 and W4A4 calls (a W4A4 layer with m <= a16_max_tokens runs the W4A16 path on the same
// memory), computed by one ISA's kernel table (nvfp4_kernels.h).
#include <memory>

#include "kernels/cpu/nvfp4_kernels.h"
#include "kernels/cpu/nvfp4_matrix.h"
#include "kernels/cpu/row_split_linear.h"

namespace fp4lm::kernels::cpu {

enum class Nvfp4Mode { w4a16, w4a4 };

class Nvfp4Linear final : public RowSplitLinear {
 public:
  // mode w4a4 needs weights with a valid input_scale. Throws Error on inconsistent weights.
  // `isa` must outlive the kernel (the tables are static).
  Nvfp4Linear(LinearWeights w, const LinearProblem& p, Nvfp4Mode mode, const Nvfp4Kernels& isa);

  // W4A16 layers: always the W4A16 kernel. W4A4 layers: the W4A4 kernel, or W4A16 when
  // force_a16 (forward(): when m <= options.a16_max_tokens, unless this thread's A16Scope
  // forces the choice).
  int64_t row_block(int64_t m) const override;
  std::unique_ptr<PreparedInput> prepare(const void* x, int64_t m, bool force_a16,
                                         ThreadPool& pool) const override;
  void run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const override;
  bool a16_for(int64_t m) const override;
  size_t weight_bytes() const override { return w_.weight_bytes; }

  Nvfp4Mode mode() const { return mode_; }
  const Nvfp4Matrix& matrix() const { return w_; }

 private:
  Nvfp4Matrix w_;
  LinearProblem p_;
  Nvfp4Mode mode_;
  const Nvfp4Kernels& isa_;
};

}  // namespace fp4lm::kernels::cpu
