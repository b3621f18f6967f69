#include "model/arch/gemma_moe.h"

#include <cmath>

#include <fmt/format.h>

#include "model/layers/activation.h"
#include "model/layer_plan.h"
#include "model/load/model_loader.h"
#include "model/layers/moe_router.h"

namespace fp4lm::model {

GemmaMoeNames gemma_moe_names(int64_t layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  return {p + "post_feedforward_layernorm_1.weight",
          p + "pre_feedforward_layernorm_2.weight",
          p + "post_feedforward_layernorm_2.weight",
          p + "router.proj",
          p + "router.scale",
          p + "router.per_expert_scale",
          p + "experts"};
}

void plan_gemma_moe(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) {
  // Router model.layers.<i>.router.proj, experts model.layers.<i>.experts (no `mlp.` level).
  plan_sparse_moe(c, i, fmt::format("model.layers.{}", i), {"gate_proj", "up_proj", "down_proj"}, out, "router.proj");
  out.back().expert_activation.gate = kernels::ExpertActivation::Gate::gelu_tanh;
}

GemmaMoeBlock::GemmaMoeBlock(ModelLoader& l, int64_t layer) : act_(l.dtype()) {
  const ModelConfig& c = l.config();
  const GemmaMoeNames n = gemma_moe_names(layer);
  hidden_ = c.hidden_size;
  num_experts_ = c.moe.num_experts;
  top_k_ = c.moe.top_k;
  post_mlp_ = load_rms_norm(l, n.post_feedforward_1, hidden_);
  pre_experts_ = load_rms_norm(l, n.pre_feedforward_2, hidden_);
  post_experts_ = load_rms_norm(l, n.post_feedforward_2, hidden_);
  router_norm_ = RmsNorm(std::vector<float>(static_cast<size_t>(hidden_), 1.0f), c.rms_norm_eps, true);
  scale_ = l.tensor_f32(n.router_scale, {hidden_});
  per_expert_scale_ = l.tensor_f32(n.per_expert_scale, {num_experts_});
  proj_ = l.load_linear(n.router);
  experts_ = l.load_moe(n.experts);
}

size_t GemmaMoeBlock::own_param_bytes() const {
  return (4 * static_cast<size_t>(hidden_) + scale_.size() + per_expert_scale_.size()) * sizeof(float);
}

void GemmaMoeBlock::route(const float* h, int64_t m, int32_t* ids, float* weights) const {
  const size_t size = static_cast<size_t>(m * hidden_);
  std::vector<float> r(size), logits(static_cast<size_t>(m * num_experts_));
  router_norm_.forward(h, m, r.data(), act_);
  // HF: (norm(h) · scale) · hidden^-1/2, each product in the activation dtype.
  const float root = static_cast<float>(std::pow(static_cast<double>(hidden_), -0.5));
  for (size_t i = 0; i < size; ++i) r[i] *= scale_[i % static_cast<size_t>(hidden_)];
  round_to_dtype(r.data(), size, act_);
  for (float& v : r) v *= root;
  round_to_dtype(r.data(), size, act_);
  proj_->forward(r.data(), m, logits.data());
  route_topk(logits.data(), m, num_experts_, top_k_, /*renormalize=*/true, DType::F32, ids, weights);
  for (int64_t i = 0; i < m * top_k_; ++i) weights[i] *= per_expert_scale_[static_cast<size_t>(ids[i])];
}

void GemmaMoeBlock::forward(const float* h, int64_t m, float* y) const {
  const size_t size = static_cast<size_t>(m * hidden_);
  std::vector<int32_t> ids(static_cast<size_t>(m * top_k_));
  std::vector<float> w(ids.size()), x(size), e(size);
  route(h, m, ids.data(), w.data());
  pre_experts_.forward(h, m, x.data(), act_);
  experts_->forward(x.data(), m, ids.data(), w.data(), top_k_, e.data());
  post_experts_.forward(e.data(), m, e.data(), act_);
  post_mlp_.forward(y, m, y, act_);
  for (size_t i = 0; i < size; ++i) y[i] += e[i];
  round_to_dtype(y, size, act_);
}

}  // namespace fp4lm::model
