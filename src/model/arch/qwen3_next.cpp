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
#include "model/arch/shared_expert_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

class Qwen3Next final : public GatedHybridArch {
 public:
  std::string_view hf_name() const override { return "Qwen3NextForCausalLM"; }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_gated_hybrid_keys(r, c);
    c.gdn.fused_qkvz = true;
    read_shared_expert_moe_keys(r, c, /*norm_topk_default=*/true);
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_gated_hybrid_mixer(c, i, out);
    plan_shared_expert_moe(c, i, fmt::format("model.layers.{}.mlp", i), out);
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return make_shared_expert_moe(l, i, l.config().moe.norm_topk_prob);
  }

  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["model_type"] = "qwen3_next";
    shared_expert_moe_synthetic_config(o, /*norm_topk=*/true, c);
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
