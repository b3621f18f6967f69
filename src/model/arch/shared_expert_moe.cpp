#include "model/arch/shared_expert_moe.h"

#include <fmt/format.h>

#include "model/layers/mlp.h"
#include "model/layers/sparse_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

void read_shared_expert_moe_keys(const ConfigReader& r, ModelConfig& c, bool norm_topk_default) {
  read_sparse_moe_keys(r, c, norm_topk_default);
  c.moe.shared_expert_intermediate_size = r.req<int64_t>("shared_expert_intermediate_size");
  r.positive("shared_expert_intermediate_size", c.moe.shared_expert_intermediate_size);
}

void plan_shared_expert_moe(const ModelConfig& c, int64_t i, const std::string& block, std::vector<LayerSpec>& out) {
  if (!c.layer_is_moe(i)) return plan_dense_mlp(c, i, block, c.intermediate_size, out);
  plan_sparse_moe(c, i, block, {"gate_proj", "up_proj", "down_proj"}, out);
  plan_dense_mlp(c, i, block + ".shared_expert", c.moe.shared_expert_intermediate_size, out);
  LayerSpec gate = plan_linear(block + ".shared_expert_gate", i, {block + ".shared_expert_gate"}, {1}, c.hidden_size);
  gate.router = true;
  out.push_back(gate);
}

std::unique_ptr<FeedForward> make_shared_expert_moe(ModelLoader& l, int64_t i, bool renormalize) {
  const std::string p = fmt::format("model.layers.{}.mlp", i);
  if (!l.config().layer_is_moe(i)) return std::make_unique<DenseMlp>(l, p);
  return std::make_unique<SparseMoe>(l, p, renormalize, /*shared_expert=*/true);
}

void shared_expert_moe_synthetic_config(const SampleShape& o, bool norm_topk, nlohmann::json& c) {
  c["num_experts"] = o.experts;
  c["num_experts_per_tok"] = o.top_k;
  c["moe_intermediate_size"] = o.moe_intermediate;
  c["shared_expert_intermediate_size"] = o.shared_expert_intermediate;
  c["norm_topk_prob"] = norm_topk;
  c["decoder_sparse_step"] = 1;
  c["mlp_only_layers"] = nlohmann::json::array();
}

}  // namespace fp4lm::model
