#pragma once
// Dense gated MLP: down(act(gate(x)) * up(x)), gate and up fused into one gate_up_proj; act is
// silu (SwiGLU) or, when config.hidden_act says gelu_pytorch_tanh, GELU's tanh form (Gemma's GeGLU).
#include <memory>
#include <string>

#include "core/dtype.h"
#include "model/layers/feed_forward.h"
#include "model/layers/linear.h"

namespace fp4lm::model {

class ModelLoader;

class DenseMlp final : public FeedForward {
 public:
  // `prefix`: the HF module, e.g. "model.layers.0.mlp" or "...mlp.shared_expert".
  DenseMlp(ModelLoader& loader, const std::string& prefix);
  void forward(const float* x, int64_t m, float* y) const override;
  size_t weight_bytes() const override { return gate_up_->weight_bytes() + down_->weight_bytes(); }

 private:
  std::unique_ptr<Linear> gate_up_, down_;
  int64_t inter_;
  DType act_;
  bool gelu_tanh_ = false;
};

}  // namespace fp4lm::model
