#pragma once
// DeepSeek-style MoE (DeepSeek-V3, Kimi K2, GLM-4.x MoE, MiniMax-M2): a router whose logits HF
// computes in float32 (`gate`, planned with f32_act), scored by sigmoid and chosen with the
// e_score_correction_bias (moe_router.h route_sigmoid_topk); the routed experts' weighted sum,
// plus, when the block has them, shared experts (`shared_experts`: a dense SwiGLU MLP of
// n_shared_experts × moe_intermediate_size, added unscaled).
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/layers/feed_forward.h"
#include "model/layers/linear.h"
#include "model/layers/mlp.h"
#include "model/layers/moe_router.h"

namespace fp4lm::model {

class ModelLoader;

// The router alone (Nemotron-H's MoE, whose experts differ, reuses it).
class SigmoidRouter {
 public:
  // `gate`: the router Linear ("model.layers.3.mlp.gate"); `bias`: the e_score_correction_bias
  // tensor ("model.layers.3.mlp.gate.e_score_correction_bias"; "" = none). Weights are rounded
  // to `weight_dtype` (F32 = as computed).
  SigmoidRouter(ModelLoader& loader, const std::string& gate, const std::string& bias, SigmoidRouting rule,
                DType weight_dtype);
  // ids, weights [m, top_k] for the inputs x [m, hidden].
  void route(const float* x, int64_t m, int32_t* ids, float* weights) const;
  int64_t top_k() const { return top_k_; }
  size_t weight_bytes() const { return gate_->weight_bytes(); }
  size_t own_param_bytes() const { return bias_.size() * sizeof(float); }

 private:
  std::unique_ptr<Linear> gate_;
  std::vector<float> bias_;
  SigmoidRouting rule_;
  DType weight_dtype_;
  int64_t num_experts_, top_k_;
};

// The routing parameters of c.moe (sigmoid, n_group, topk_group, norm_topk_prob, routed_scaling_factor).
SigmoidRouting sigmoid_routing(const ModelConfig& c);

class SigmoidMoe final : public FeedForward {
 public:
  // `block`: the HF module holding gate, experts and shared_experts ("model.layers.3.mlp");
  // `bias`: the e_score_correction_bias tensor; `shared`: whether shared_experts exist.
  SigmoidMoe(ModelLoader& loader, const std::string& block, const std::string& bias, bool shared,
             DType weight_dtype);
  void forward(const float* x, int64_t m, float* y) const override;
  size_t weight_bytes() const override;
  const SigmoidRouter& router() const { return router_; }

 private:
  SigmoidRouter router_;
  std::unique_ptr<FusedMoe> experts_;
  std::unique_ptr<DenseMlp> shared_;
  int64_t hidden_;
  DType act_;
};

}  // namespace fp4lm::model
