#pragma once
// Gemma 3n's MLP (transformers' Gemma3nTextMLP): down(gelu_tanh(g) · up(x)), g = gate(x), where a
// layer with activation sparsity s > 0 first keeps only the gate values above a Gaussian quantile
// of their row (_gaussian_topk): g ← relu(g - (mean(g) + std(g) · Φ⁻¹(s))), std the population
// one, Φ⁻¹(s) computed in float32 (torch's Normal(0, 1).icdf on a float32 tensor). With s = 0.95
// about 5% of the gate stays non-zero. gate / up fused into gate_up_proj as DenseMlp's.
#include <memory>
#include <string>

#include "core/dtype.h"
#include "model/layers/feed_forward.h"
#include "model/layers/linear.h"

namespace fp4lm::model {

class ModelLoader;

// Φ⁻¹(p), the standard normal quantile, for p in (0, 1).
double normal_quantile(double p);

class GaussianTopkMlp final : public FeedForward {
 public:
  // `prefix`: "model.layers.<i>.mlp"; `sparsity` in [0, 1): 0 = a plain GeGLU MLP.
  GaussianTopkMlp(ModelLoader& loader, const std::string& prefix, double sparsity);
  void forward(const float* x, int64_t m, float* y) const override;
  size_t weight_bytes() const override { return gate_up_->weight_bytes() + down_->weight_bytes(); }

 private:
  std::unique_ptr<Linear> gate_up_, down_;
  int64_t inter_;
  DType act_;
  bool sparse_;
  float multiplier_ = 0;  // Φ⁻¹(sparsity) in float32
};

}  // namespace fp4lm::model
