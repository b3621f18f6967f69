// Qwen3MoeForCausalLM: Qwen3 attention (q_norm / k_norm); layer i is a sparse MoE block "mlp"
// (router `gate`, experts `experts.E.{gate,up,down}_proj`, softmax top-k renormalized when
// norm_topk_prob, default true) unless it is listed in mlp_only_layers or off the
// decoder_sparse_step grid, where it is a dense MLP.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/layers/mlp.h"
#include "model/layers/sparse_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

class Qwen3Moe final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "Qwen3MoeForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_sparse_moe_keys(r, c, /*norm_topk_default=*/true);
    c.qk_norm = true;
  }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    const std::string p = fmt::format("model.layers.{}.mlp", i);
    if (!c.layer_is_moe(i)) return plan_dense_mlp(c, i, p, c.intermediate_size, out);
    plan_sparse_moe(c, i, p, {"gate_proj", "up_proj", "down_proj"}, out);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    const std::string p = fmt::format("model.layers.{}.mlp", i);
    if (!l.config().layer_is_moe(i)) return std::make_unique<DenseMlp>(l, p);
    return std::make_unique<SparseMoe>(l, p, l.config().moe.norm_topk_prob, /*shared_expert=*/false);
  }
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["num_experts"] = o.experts;
    c["num_experts_per_tok"] = o.top_k;
    c["moe_intermediate_size"] = o.moe_intermediate;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::json::array();
  }
};

}  // namespace

const ArchDef& qwen3_moe_arch() {
  static const Qwen3Moe d;
  return d;
}

}  // namespace fp4lm::model
