#include "model/layers/sparse_moe.h"

#include <cmath>
#include <vector>

#include "model/layers/activation.h"
#include "model/load/model_loader.h"
#include "model/layers/moe_router.h"

namespace fp4lm::model {

SparseMoe::SparseMoe(ModelLoader& loader, const std::string& block, bool renormalize, bool shared_expert,
                     const std::string& router)
    : renormalize_(renormalize), act_(loader.dtype()) {
  const ModelConfig& c = loader.config();
  num_experts_ = c.moe.num_experts;
  top_k_ = c.moe.top_k;
  hidden_ = c.hidden_size;
  router_ = loader.load_linear(block + "." + router);
  experts_ = loader.load_moe(block + ".experts");
  if (shared_expert) {
    shared_ = std::make_unique<DenseMlp>(loader, block + ".shared_expert");
    shared_gate_ = loader.load_linear(block + ".shared_expert_gate");
  }
}

size_t SparseMoe::weight_bytes() const {
  size_t b = router_->weight_bytes() + experts_->weight_bytes();
  if (shared_) b += shared_->weight_bytes() + shared_gate_->weight_bytes();
  return b;
}

void SparseMoe::route(const float* x, int64_t m, int32_t* ids, float* weights) const {
  std::vector<float> logits(static_cast<size_t>(m * num_experts_));
  router_->forward(x, m, logits.data());
  route_topk(logits.data(), m, num_experts_, top_k_, renormalize_, act_, ids, weights);
}

void SparseMoe::forward(const float* x, int64_t m, float* y) const {
  std::vector<int32_t> ids(static_cast<size_t>(m * top_k_));
  std::vector<float> w(ids.size());
  route(x, m, ids.data(), w.data());
  experts_->forward(x, m, ids.data(), w.data(), top_k_, y);
  if (!shared_) return;
  std::vector<float> s(static_cast<size_t>(m * hidden_)), g(static_cast<size_t>(m));
  shared_->forward(x, m, s.data());
  shared_gate_->forward(x, m, g.data());
  for (int64_t i = 0; i < m; ++i) {
    const float scale = 1.0f / (1.0f + std::exp(-g[i]));
    float* si = s.data() + i * hidden_;
    for (int64_t c = 0; c < hidden_; ++c) si[c] *= scale;
  }
  round_to_dtype(s.data(), s.size(), act_);
  for (size_t i = 0; i < s.size(); ++i) y[i] += s[i];
  round_to_dtype(y, s.size(), act_);
}

}  // namespace fp4lm::model
