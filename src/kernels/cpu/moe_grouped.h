#pragma once
// Grouped MoE on the CPU Linear kernels (ISA-neutral): the m×top_k (token, slot) pairs are sorted
// by expert; each active expert runs one GEMM over its gathered tokens for w13, then
// the expert activation (MoeProblem::activation: SiLU(gate)·up by default), then one GEMM for w2; the slot outputs are summed with their routing weights in
// slot order. M=1 decode is the same path (top_k GEMVs). The row blocks of all active experts
// form one parallel loop per projection (w13, then w2), so decode's small GEMVs run side by side.
// Semantics equal ReferenceMoe's: h13 (biases included), the activated intermediate and each expert's output are
// rounded to the activation dtype, and a token's outputs are summed in fp32 in slot order.
#include <functional>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/cpu/row_split_linear.h"

namespace fp4lm::kernels::cpu {

class GroupedMoe final : public MoeKernel {
 public:
  using MakeLinear = std::function<std::unique_ptr<RowSplitLinear>(LinearWeights, const LinearProblem&)>;
  // `make` builds one expert projection (an Nvfp4Linear, a DenseLinear). For W4A4 experts, a
  // call with m <= a16_max_tokens runs every expert at W4A16 (decided per call, or forced by the
  // thread's kernels::A16Scope).
  GroupedMoe(MoeWeights w, const MoeProblem& p, const MakeLinear& make);
  void forward(const void* x, int64_t m, const int32_t* topk_ids, const float* topk_weights,
               int64_t top_k, void* y, ThreadPool& pool) const override;
  size_t weight_bytes() const override;

 private:
  MoeProblem p_;
  int64_t hidden_ = 0, inter_ = 0;
  std::vector<std::unique_ptr<RowSplitLinear>> w13_, w2_;
  std::shared_ptr<const void> keepalive_;
};

}  // namespace fp4lm::kernels::cpu
