// Qwen3NextForCausalLM: the hybrid of arch/gated_hybrid.h (gated delta-net + gated attention,
// zero-centered norms, partial RoPE) with the GDN input projections fused and interleaved per
// key head, as transformers' Qwen3NextGatedDeltaNet stores them: in_proj_qkvz rows are, for each
// key head h, [q_h (DK), k_h (DK), v (NV/NK value heads × DV), z (NV/NK × DV)]; in_proj_ba rows
// are, per key head, [b (NV/NK), a (NV/NK)]. The MoE is Qwen2-MoE's: softmax top-k,
// renormalized only when norm_topk_prob (default true), plus a shared expert ×
// sigmoid(shared_expert_gate); mlp_only_layers / decoder_sparse_step give dense MLP layers
// (intermediate_size). Top-level rope_theta / partial_rotary_factor (default 0.25).
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/arch/gated_hybrid.h"
#include "model/mlp.h"
#include "model/model_loader.h"
#include "model/sparse_moe.h"
#include "model/synthetic_checkpoint.h"

namespace fp4lm::model {

namespace {

class Qwen3Next final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "Qwen3NextForCausalLM"; }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_gated_hybrid_keys(r, c);
    c.gdn_fused_qkvz = true;
    read_sparse_moe_keys(r, c, /*norm_topk_default=*/true);
    c.shared_expert_intermediate_size = r.req<int64_t>("shared_expert_intermediate_size");
    r.positive("shared_expert_intermediate_size", c.shared_expert_intermediate_size);
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_gated_hybrid_mixer(c, i, out);
    const std::string p = fmt::format("model.layers.{}.mlp", i);
    if (!c.layer_is_moe(i)) return plan_dense_mlp(c, i, p, c.intermediate_size, out);
    plan_moe_with_shared_expert(c, i, p, out);
  }

  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    return gated_hybrid_layer_params(c, i);
  }

  std::unique_ptr<Mixer> make_mixer(ModelLoader& l, int64_t i, const Rope& rope) const override {
    return make_gated_hybrid_mixer(l, i, rope);
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    const std::string p = fmt::format("model.layers.{}.mlp", i);
    if (!l.config().layer_is_moe(i)) return std::make_unique<DenseMlp>(l, p);
    return std::make_unique<SparseMoe>(l, p, l.config().norm_topk_prob, /*shared_expert=*/true);
  }

  void synthetic_config(const SyntheticOptions& o, nlohmann::json& c) const override {
    c["model_type"] = "qwen3_next";
    c["num_experts"] = o.experts;
    c["num_experts_per_tok"] = o.top_k;
    c["moe_intermediate_size"] = o.moe_intermediate;
    c["shared_expert_intermediate_size"] = o.shared_expert_intermediate;
    c["norm_topk_prob"] = true;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::json::array();
    gated_hybrid_synthetic_config(o, c);
    c["partial_rotary_factor"] = 0.25;
  }
};

}  // namespace

const ArchDef& qwen3_next_arch() {
  static const Qwen3Next d;
  return d;
}

}  // namespace fp4lm::model
