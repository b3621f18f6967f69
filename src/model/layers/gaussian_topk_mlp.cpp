#include "model/layers/gaussian_topk_mlp.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "model/layers/activation.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

double normal_quantile(double p) {
  // Newton's method on Φ(x) - p from x = 0; Φ is smooth and monotone, so a few steps reach
  // double precision for the quantiles configs use (0.95: 1.6448536269514722).
  double x = 0;
  for (int i = 0; i < 100; ++i) {
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2.0 * M_PI);
    const double step = (cdf - p) / pdf;
    x -= step;
    if (std::abs(step) < 1e-15 * std::max(1.0, std::abs(x))) break;
  }
  return x;
}

GaussianTopkMlp::GaussianTopkMlp(ModelLoader& loader, const std::string& prefix, double sparsity)
    : act_(loader.dtype()), sparse_(sparsity > 0) {
  gate_up_ = loader.load_linear(prefix + ".gate_up_proj");
  down_ = loader.load_linear(prefix + ".down_proj");
  inter_ = down_->in_features();
  if (sparse_) multiplier_ = static_cast<float>(normal_quantile(sparsity));
}

void GaussianTopkMlp::forward(const float* x, int64_t m, float* y) const {
  std::vector<float> gu(static_cast<size_t>(m * 2 * inter_)), h(static_cast<size_t>(m * inter_));
  gate_up_->forward(x, m, gu.data());
  round_to_dtype(gu.data(), gu.size(), act_);
  for (int64_t i = 0; i < m; ++i) {
    float* g = gu.data() + i * 2 * inter_;
    const float* u = g + inter_;
    if (sparse_) {
      double mean = 0, var = 0;
      for (int64_t c = 0; c < inter_; ++c) mean += g[c];
      mean /= static_cast<double>(inter_);
      for (int64_t c = 0; c < inter_; ++c) var += (g[c] - mean) * (g[c] - mean);
      const double std = std::sqrt(var / static_cast<double>(inter_));
      const auto cutoff = static_cast<float>(mean + std * static_cast<double>(multiplier_));
      for (int64_t c = 0; c < inter_; ++c) g[c] = std::max(g[c] - cutoff, 0.0f);
      round_to_dtype(g, static_cast<size_t>(inter_), act_);
    }
    float* hi = h.data() + i * inter_;
    for (int64_t c = 0; c < inter_; ++c) hi[c] = gelu_tanh(g[c]) * u[c];
  }
  round_to_dtype(h.data(), h.size(), act_);
  down_->forward(h.data(), m, y);
}

}  // namespace fp4lm::model
