#pragma once
// The non-gated MLP of Nemotron-H: down_proj(relu(up_proj(x))²), as transformers' NemotronHMLP
// with mlp_hidden_act relu2 (its MLP layers, its MoE layers' routed and shared experts). The
// squared activation is rounded to the activation dtype before down_proj, as torch computes it.
#include <memory>
#include <string>

#include "core/dtype.h"
#include "model/layers/feed_forward.h"
#include "model/layers/linear.h"

namespace fp4lm::model {

class ModelLoader;

class Relu2Mlp final : public FeedForward {
 public:
  // `prefix`: the module holding up_proj and down_proj ("model.layers.3.mixer").
  Relu2Mlp(ModelLoader& loader, const std::string& prefix);
  void forward(const float* x, int64_t m, float* y) const override;
  size_t weight_bytes() const override { return up_->weight_bytes() + down_->weight_bytes(); }

 private:
  std::unique_ptr<Linear> up_, down_;
  DType act_;
};

}  // namespace fp4lm::model
