#pragma once
// The MoE block of Nemotron-H's 'E' layers (Nemotron 3: Nano-30B-A3B, Super-120B-A12B, Ultra),
// as transformers' NemotronHMoE computes it:
//   y = fc2(Σ_j w_j · expert_{e_j}(fc1(x))) + shared_experts(x)
// fc1 / fc2 the latent MoE's fc1_latent_proj / fc2_latent_proj (moe_latent_size: Super, Ultra),
// identities otherwise; the router and the shared expert read x itself.
// - the DeepSeek-style sigmoid router (model/layers/sigmoid_moe.h SigmoidRouter: float32 logits,
//   e_score_correction_bias for the choice, n_group / topk_group, norm_topk_prob,
//   routed_scaling_factor; the weights stay float32);
// - routed experts that are non-gated relu² MLPs (model/layers/relu2_mlp.h), one Linear pair each, run
//   on the rows routed to them; their weighted outputs summed in float32 in expert-id order (as
//   transformers' index_add_ over the hit experts) and rounded once to the activation dtype;
// - the shared expert, a relu² MLP of moe_shared_expert_intermediate_size on the block's input,
//   added unscaled (transformers builds exactly one, whatever n_shared_experts says).
// The experts are per-expert Linears, not the grouped MoE kernel (kernels/cpu/moe_grouped.h),
// whose experts are SwiGLU (w13 = gate and up).
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/layers/feed_forward.h"
#include "model/layers/linear.h"
#include "model/layers/relu2_mlp.h"
#include "model/layers/sigmoid_moe.h"

namespace fp4lm::model {

class ModelLoader;

class NemotronMoe final : public FeedForward {
 public:
  // `block`: the module holding gate, experts and shared_experts ("model.layers.1.mixer").
  NemotronMoe(ModelLoader& loader, const std::string& block);
  void forward(const float* x, int64_t m, float* y) const override;
  size_t weight_bytes() const override;

 private:
  SigmoidRouter router_;
  std::vector<std::unique_ptr<Relu2Mlp>> experts_;
  std::unique_ptr<Relu2Mlp> shared_;
  std::unique_ptr<Linear> fc1_, fc2_;  // the latent projections; null without moe_latent_size
  int64_t hidden_, width_;             // width_: the experts' input and output (latent or hidden)
  DType act_;
};

}  // namespace fp4lm::model
