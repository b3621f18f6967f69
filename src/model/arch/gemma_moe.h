#pragma once
// Gemma 4's MoE block (enable_moe_block: 26B-A4B), run beside the dense MLP of the same layer, as
// transformers' Gemma4TextDecoderLayer and Gemma4TextRouter compute it. Both branches read the
// residual stream h before the feed-forward half:
//   router:  r = rms(h) (no weight) · router.scale · hidden^-1/2; p = softmax(router.proj(r)) in
//            float32; the top_k_experts largest (ties: the lower id), renormalized to sum 1, each
//            × router.per_expert_scale[id] (float32, not rounded);
//   experts: GELU-tanh gated experts (plan: ExpertActivation gelu_tanh) on
//            pre_feedforward_layernorm_2(h);
//   y = post_feedforward_layernorm_1(mlp(pre_feedforward_layernorm(h)))
//     + post_feedforward_layernorm_2(experts), then the layer's post_feedforward_layernorm.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/layers/linear.h"
#include "model/model_config.h"
#include "model/layers/rms_norm.h"

namespace fp4lm::model {

class ModelLoader;
struct LayerSpec;

// The block's tensor names in layer i (the loader, layer_params and plan_layer read them here).
struct GemmaMoeNames {
  std::string post_feedforward_1, pre_feedforward_2, post_feedforward_2;  // norms (".weight")
  std::string router, router_scale, per_expert_scale;  // router.proj (Linear), router.scale, router.per_expert_scale
  std::string experts;                                 // the experts container
};
GemmaMoeNames gemma_moe_names(int64_t layer);

// Appends the router Linear (kept unquantized) and the GELU-tanh experts of layer i to a plan.
void plan_gemma_moe(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out);

class GemmaMoeBlock {
 public:
  GemmaMoeBlock(ModelLoader& l, int64_t layer);
  // y [m, hidden]: in, the dense MLP's output; out, the two branches' normed sum (rounded to the
  // activation dtype). h [m, hidden]: the residual stream before the feed-forward half.
  void forward(const float* h, int64_t m, float* y) const;
  // ids, weights [m, top_k] for the residual stream h.
  void route(const float* h, int64_t m, int32_t* ids, float* weights) const;
  int64_t top_k() const { return top_k_; }
  size_t own_param_bytes() const;

 private:
  RmsNorm post_mlp_, pre_experts_, post_experts_, router_norm_;
  std::vector<float> scale_, per_expert_scale_;
  std::unique_ptr<Linear> proj_;
  std::unique_ptr<FusedMoe> experts_;
  int64_t hidden_, num_experts_, top_k_;
  DType act_;
};

}  // namespace fp4lm::model
