#pragma once
// Grouped MoE on the NVFP4 CPU kernels (ISA-neutral): the m×top_k (token, slot) pairs are sorted
// by expert; each active expert runs one GEMM over its gathered tokens for w13, then
// SiLU(gate)·up, then one GEMM for w2; the slot outputs are scatter-added with their routing
// weights in slot order. M=1 decode is the same path (top_k GEMVs).
// Semantics equal ReferenceMoe's: h13, the SiLU·up intermediate and each expert's output are
// rounded to the activation dtype, and a token's outputs are summed in fp32 in slot order.
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/nvfp4_linear.h"

namespace fp4lm::kernels::cpu {

class GroupedMoe final : public MoeKernel {
 public:
  // mode w4a4: W4A4 experts (calls with m <= a16_max_tokens run every expert at W4A16).
  GroupedMoe(MoeWeights w, const MoeProblem& p, Nvfp4Mode mode);
  void forward(const void* x, int64_t m, const int32_t* topk_ids, const float* topk_weights,
               int64_t top_k, void* y, ThreadPool& pool) const override;
  size_t weight_bytes() const override;

 private:
  MoeProblem p_;
  Nvfp4Mode mode_;
  int64_t hidden_ = 0, inter_ = 0;
  std::vector<Nvfp4Linear> w13_, w2_;
  std::shared_ptr<const void> keepalive_;
};

}  // namespace fp4lm::kernels::cpu
