#pragma once
// The NVFP4 Linear kernel of the CPU AVX2 backends: one prepared Nvfp4Matrix serving W4A16 and
// W4A4 calls (a W4A4 layer with m <= a16_max_tokens runs the W4A16 path on the same memory).
#include <memory>

#include "kernels/backend.h"
#include "kernels/cpu/nvfp4_matrix.h"

namespace fp4lm::kernels::cpu {

enum class Nvfp4Mode { w4a16, w4a4 };

class Nvfp4Linear final : public LinearKernel {
 public:
  // mode w4a4 needs weights with a valid input_scale. Throws Error on inconsistent weights.
  Nvfp4Linear(LinearWeights w, const LinearProblem& p, Nvfp4Mode mode);

  // W4A16 layers: always the W4A16 kernel. W4A4 layers: the W4A4 kernel, or W4A16 when
  // m <= options.a16_max_tokens.
  void forward(const void* x, int64_t m, void* y, ThreadPool& pool) const override;
  // Runs the given kernel regardless of a16_max_tokens (w4a4 only on a W4A4 layer).
  void forward_with(Nvfp4Mode mode, const void* x, int64_t m, void* y, ThreadPool& pool) const;
  size_t weight_bytes() const override { return w_.weight_bytes; }

  Nvfp4Mode mode() const { return mode_; }
  // The kernel forward() uses for a call with m tokens.
  Nvfp4Mode mode_for(int64_t m) const;
  const Nvfp4Matrix& matrix() const { return w_; }

 private:
  Nvfp4Matrix w_;
  LinearProblem p_;
  Nvfp4Mode mode_;
};

}  // namespace fp4lm::kernels::cpu
