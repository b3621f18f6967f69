#include "model/layers/sigmoid_moe.h"

#include "model/layers/activation.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

SigmoidRouting sigmoid_routing(const ModelConfig& c) {
  return SigmoidRouting{.n_group = c.moe.sigmoid.n_group,
                        .topk_group = c.moe.sigmoid.topk_group,
                        .renormalize = c.moe.norm_topk_prob,
                        .scaling = c.moe.sigmoid.routed_scaling_factor};
}

SigmoidRouter::SigmoidRouter(ModelLoader& loader, const std::string& gate, const std::string& bias,
                             SigmoidRouting rule, DType weight_dtype)
    : rule_(rule), weight_dtype_(weight_dtype) {
  const ModelConfig& c = loader.config();
  num_experts_ = c.moe.num_experts;
  top_k_ = c.moe.top_k;
  gate_ = loader.load_linear(gate);
  if (!bias.empty()) bias_ = loader.tensor_f32(bias, {num_experts_});
}

void SigmoidRouter::route(const float* x, int64_t m, int32_t* ids, float* weights) const {
  std::vector<float> logits(static_cast<size_t>(m * num_experts_));
  gate_->forward(x, m, logits.data());
  route_sigmoid_topk(logits.data(), bias_.empty() ? nullptr : bias_.data(), m, num_experts_, top_k_, rule_,
                     weight_dtype_, ids, weights);
}

SigmoidMoe::SigmoidMoe(ModelLoader& loader, const std::string& block, const std::string& bias, bool shared,
                       DType weight_dtype)
    : router_(loader, block + ".gate", bias, sigmoid_routing(loader.config()), weight_dtype),
      hidden_(loader.config().hidden_size),
      act_(loader.dtype()) {
  experts_ = loader.load_moe(block + ".experts");
  if (shared) shared_ = std::make_unique<DenseMlp>(loader, block + ".shared_experts");
}

size_t SigmoidMoe::weight_bytes() const {
  size_t b = router_.weight_bytes() + router_.own_param_bytes() + experts_->weight_bytes();
  if (shared_) b += shared_->weight_bytes();
  return b;
}

void SigmoidMoe::forward(const float* x, int64_t m, float* y) const {
  const int64_t k = router_.top_k();
  std::vector<int32_t> ids(static_cast<size_t>(m * k));
  std::vector<float> w(ids.size());
  router_.route(x, m, ids.data(), w.data());
  experts_->forward(x, m, ids.data(), w.data(), k, y);
  if (!shared_) return;
  std::vector<float> s(static_cast<size_t>(m * hidden_));
  shared_->forward(x, m, s.data());
  for (size_t i = 0; i < s.size(); ++i) y[i] += s[i];
  round_to_dtype(y, s.size(), act_);
}

}  // namespace fp4lm::model
