// Qwen3_5MoeForCausalLM / Qwen3_5MoeForConditionalGeneration (the text model only; the VL form's
// keys under text_config and tensors under model.language_model., see parse_model_config): a
// hybrid whose layers' mixers are gated delta-nets (linear_attention, model/layers/gated_delta_net.h)
// or gated full attention (model/layers/attention.h), chosen by layer_types / full_attention_interval
// (arch/gated_hybrid.h). The GDN's projections are separate tensors: in_proj_qkv, in_proj_z,
// in_proj_b, in_proj_a. Every layer's feed-forward is a sparse MoE (top-k always renormalized)
// with a shared expert scaled by sigmoid(shared_expert_gate(x)).
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/arch/gated_hybrid.h"
#include "model/arch/shared_expert_moe.h"
#include "model/vision/qwen3_5_vision_tower.h"

namespace fp4lm::model {

namespace {

class Qwen3_5Moe final : public GatedHybridArch {
 public:
  explicit Qwen3_5Moe(const char* name) : name_(name) {}
  std::string_view hf_name() const override { return name_; }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_gated_hybrid_keys(r, c);
    c.moe.num_experts = r.req<int64_t>("num_experts");
    c.moe.top_k = r.req<int64_t>("num_experts_per_tok");
    c.moe.moe_intermediate_size = r.req<int64_t>("moe_intermediate_size");
    c.moe.norm_topk_prob = true;  // qwen3_5_moe always renormalizes the top-k weights
    c.moe.shared_expert_intermediate_size = r.req<int64_t>("shared_expert_intermediate_size");
    r.positive("shared_expert_intermediate_size", c.moe.shared_expert_intermediate_size);
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_gated_hybrid_mixer(c, i, out);
    plan_shared_expert_moe(c, i, fmt::format("model.layers.{}.mlp", i), out);
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return make_shared_expert_moe(l, i, /*renormalize=*/true);
  }

  // The VL form's model.visual.* (vision_config); nullptr for a text-only checkpoint.
  std::unique_ptr<ImageEncoder> load_image_encoder(ModelLoader& l) const override {
    return Qwen3_5VisionTower::load(l);
  }

  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["model_type"] = "qwen3_5_moe_text";
    c["num_experts"] = o.experts;
    c["num_experts_per_tok"] = o.top_k;
    c["moe_intermediate_size"] = o.moe_intermediate;
    c["shared_expert_intermediate_size"] = o.shared_expert_intermediate;
    qwen3_5_synthetic_config(o, c);
  }

 private:
  const char* name_;
};

}  // namespace

const ArchDef& qwen3_5_moe_arch() {
  static const Qwen3_5Moe d("Qwen3_5MoeForCausalLM");
  return d;
}
const ArchDef& qwen3_5_moe_vl_arch() {
  static const Qwen3_5Moe d("Qwen3_5MoeForConditionalGeneration");
  return d;
}

}  // namespace fp4lm::model
