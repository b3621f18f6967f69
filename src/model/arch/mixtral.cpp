// MixtralForCausalLM: Llama attention; every layer a sparse MoE block "block_sparse_moe" (router
// `gate`, experts `experts.E.{w1,w3,w2}` sized by intermediate_size, num_local_experts of them),
// softmax top-k always renormalized.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/layers/sparse_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

class Mixtral final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "MixtralForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    c.moe.num_experts = r.req<int64_t>("num_local_experts");
    c.moe.top_k = r.req<int64_t>("num_experts_per_tok");
    c.moe.moe_intermediate_size = r.req<int64_t>("intermediate_size");
    c.intermediate_size = c.moe.moe_intermediate_size;
    c.moe.norm_topk_prob = true;  // Mixtral always renormalizes its top-k softmax weights
  }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    plan_sparse_moe(c, i, fmt::format("model.layers.{}.block_sparse_moe", i), {"w1", "w3", "w2"}, out);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<SparseMoe>(l, fmt::format("model.layers.{}.block_sparse_moe", i), /*renormalize=*/true,
                                       /*shared_expert=*/false);
  }
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["num_local_experts"] = o.experts;
    c["num_experts_per_tok"] = o.top_k;
  }
};

}  // namespace

const ArchDef& mixtral_arch() {
  static const Mixtral d;
  return d;
}

}  // namespace fp4lm::model
