// Qwen2MoeForCausalLM: Qwen2 attention (q/k/v bias always); sparse layers ("mlp": router `gate`,
// experts `experts.E.{gate,up,down}_proj`) add a dense shared expert scaled per token by
// sigmoid(shared_expert_gate(x)); top-k weights renormalized only when norm_topk_prob (default
// false). mlp_only_layers / decoder_sparse_step give dense layers.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/mlp.h"
#include "model/model_loader.h"
#include "model/sparse_moe.h"
#include "model/synthetic_checkpoint.h"

namespace fp4lm::model {

namespace {

class Qwen2Moe final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "Qwen2MoeForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    c.attention_bias = true;
    read_sparse_moe_keys(r, c, /*norm_topk_default=*/false);
    c.shared_expert_intermediate_size = r.req<int64_t>("shared_expert_intermediate_size");
    r.positive("shared_expert_intermediate_size", c.shared_expert_intermediate_size);
  }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    const std::string p = fmt::format("model.layers.{}.mlp", i);
    if (!c.layer_is_moe(i)) return plan_dense_mlp(c, i, p, c.intermediate_size, out);
    plan_sparse_moe(c, i, p, {"gate_proj", "up_proj", "down_proj"}, out);
    plan_dense_mlp(c, i, p + ".shared_expert", c.shared_expert_intermediate_size, out);
    LayerSpec gate = plan_linear(p + ".shared_expert_gate", i, {p + ".shared_expert_gate"}, {1}, c.hidden_size);
    gate.router = true;
    out.push_back(gate);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    const std::string p = fmt::format("model.layers.{}.mlp", i);
    if (!l.config().layer_is_moe(i)) return std::make_unique<DenseMlp>(l, p);
    return std::make_unique<SparseMoe>(l, p, l.config().norm_topk_prob, /*shared_expert=*/true);
  }
  void synthetic_config(const SyntheticOptions& o, nlohmann::json& c) const override {
    c["num_experts"] = o.experts;
    c["num_experts_per_tok"] = o.top_k;
    c["moe_intermediate_size"] = o.moe_intermediate;
    c["norm_topk_prob"] = false;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::json::array();
    c["shared_expert_intermediate_size"] = o.shared_expert_intermediate;
  }
};

}  // namespace

const ArchDef& qwen2_moe_arch() {
  static const Qwen2Moe d;
  return d;
}

}  // namespace fp4lm::model
