// Qwen2MoeForCausalLM: Qwen2 attention (q/k/v bias always); sparse layers ("mlp": router `gate`,
// experts `experts.E.{gate,up,down}_proj`) add a dense shared expert scaled per token by
// sigmoid(shared_expert_gate(x)); top-k weights renormalized only when norm_topk_prob (default
// false). mlp_only_layers / decoder_sparse_step give dense layers.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/arch/shared_expert_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

class Qwen2Moe final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "Qwen2MoeForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    c.attention_bias = true;
    read_shared_expert_moe_keys(r, c, /*norm_topk_default=*/false);
  }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    plan_shared_expert_moe(c, i, fmt::format("model.layers.{}.mlp", i), out);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return make_shared_expert_moe(l, i, l.config().moe.norm_topk_prob);
  }
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    shared_expert_moe_synthetic_config(o, /*norm_topk=*/false, c);
  }
};

}  // namespace

const ArchDef& qwen2_moe_arch() {
  static const Qwen2Moe d;
  return d;
}

}  // namespace fp4lm::model
