#include "model/layers/relu2_mlp.h"

#include <vector>

#include "model/layers/activation.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

Relu2Mlp::Relu2Mlp(ModelLoader& loader, const std::string& prefix) : act_(loader.dtype()) {
  up_ = loader.load_linear(prefix + ".up_proj");
  down_ = loader.load_linear(prefix + ".down_proj");
}

void Relu2Mlp::forward(const float* x, int64_t m, float* y) const {
  std::vector<float> h(static_cast<size_t>(m * up_->out_features()));
  up_->forward(x, m, h.data());
  for (float& v : h) v = v > 0.0f ? v * v : 0.0f;
  round_to_dtype(h.data(), h.size(), act_);
  down_->forward(h.data(), m, y);
}

}  // namespace fp4lm::model
