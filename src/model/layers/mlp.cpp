#include "model/layers/mlp.h"

#include <vector>

#include "model/layers/activation.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

DenseMlp::DenseMlp(ModelLoader& loader, const std::string& prefix)
    : act_(loader.dtype()), gelu_tanh_(loader.config().hidden_act == "gelu_pytorch_tanh") {
  gate_up_ = loader.load_linear(prefix + ".gate_up_proj");
  down_ = loader.load_linear(prefix + ".down_proj");
  inter_ = down_->in_features();
}

void DenseMlp::forward(const float* x, int64_t m, float* y) const {
  std::vector<float> gu(static_cast<size_t>(m * 2 * inter_)), h(static_cast<size_t>(m * inter_));
  gate_up_->forward(x, m, gu.data());
  for (int64_t i = 0; i < m; ++i) {
    const float* g = gu.data() + i * 2 * inter_;
    const float* u = g + inter_;
    float* hi = h.data() + i * inter_;
    if (gelu_tanh_)
      for (int64_t c = 0; c < inter_; ++c) hi[c] = gelu_tanh(g[c]) * u[c];
    else
      for (int64_t c = 0; c < inter_; ++c) hi[c] = silu(g[c]) * u[c];
  }
  round_to_dtype(h.data(), h.size(), act_);
  down_->forward(h.data(), m, y);
}

}  // namespace fp4lm::model
