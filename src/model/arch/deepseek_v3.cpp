// DeepseekV3ForCausalLM (DeepSeek-V3 / R1, Kimi K2's text model) and Glm4MoeLiteForCausalLM
// (GLM-4.7-Flash): multi-head latent attention (model/layers/latent_attention.h: q_a_proj →
// q_a_layernorm → q_b_proj or a plain q_proj, kv_a_proj_with_mqa → kv_a_layernorm → kv_b_proj,
// YaRN RoPE with mscale in the softmax scale; the cache holds the latent) and the DeepSeek-style
// MoE feed-forward (arch/deepseek_moe.h). GLM-4.7-Flash differs only in its defaults and may
// give the dense layers as mlp_layer_types. The multi-token-prediction layer(s)
// (num_nextn_predict_layers, model.layers.<num_hidden_layers>.*) are skipped, never read.
// Kimi K2.5 / K2.6 (Kimi_K25ForConditionalGeneration as transformers names it,
// KimiK25ForConditionalGeneration as Moonshot's remote code does) wrap this text model: its keys
// under text_config, its tensors in the original layout transformers also saves
// (language_model.model.*, language_model.lm_head.weight, tied by the top level's
// tie_word_embeddings, default true as Kimi_K25Config's). Its MoonViT tower and projector
// (vision_tower.*, mm_projector.*, vision_config) are not run: text input only, said once at load.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/arch/deepseek_moe.h"
#include "model/layers/latent_attention.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

void read_mla_keys(const ConfigReader& r, ModelConfig& c) {
  LatentAttentionConfig& a = c.mla;
  a.q_lora_rank = r.opt<int64_t>("q_lora_rank", 0);  // null: a plain q_proj
  if (a.q_lora_rank < 0) fail("{}: field 'q_lora_rank' must be positive or null, found {}", r.path, a.q_lora_rank);
  a.kv_lora_rank = r.req<int64_t>("kv_lora_rank");
  a.qk_nope_head_dim = r.req<int64_t>("qk_nope_head_dim");
  a.qk_rope_head_dim = r.req<int64_t>("qk_rope_head_dim");
  a.v_head_dim = r.req<int64_t>("v_head_dim");
  for (auto [k, v] : {std::pair{"kv_lora_rank", a.kv_lora_rank}, {"qk_nope_head_dim", a.qk_nope_head_dim},
                      {"qk_rope_head_dim", a.qk_rope_head_dim}, {"v_head_dim", a.v_head_dim}})
    r.positive(k, v);
  if (a.qk_rope_head_dim % 2 != 0) fail("{}: qk_rope_head_dim must be even, found {}", r.path, a.qk_rope_head_dim);
  a.rope_interleave = r.opt<bool>("rope_interleave", true);
  c.head_dim = a.qk_rope_head_dim;
  c.rotary_dim = a.qk_rope_head_dim;
  c.num_kv_heads = c.num_heads;  // MLA has no KV heads of its own; the latent is shared by all
  c.num_nextn_predict_layers = r.opt<int64_t>("num_nextn_predict_layers", 0);
}

void plan_mla(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) {
  const LatentAttentionConfig& a = c.mla;
  const std::string p = fmt::format("model.layers.{}.self_attn", i);
  const int64_t q_rows = c.num_heads * a.qk_head_dim();
  if (a.q_lora_rank > 0) {
    out.push_back(plan_linear(p + ".q_a_proj", i, {p + ".q_a_proj"}, {a.q_lora_rank}, c.hidden_size, c.attention_bias));
    out.push_back(plan_linear(p + ".q_b_proj", i, {p + ".q_b_proj"}, {q_rows}, a.q_lora_rank));
  } else {
    out.push_back(plan_linear(p + ".q_proj", i, {p + ".q_proj"}, {q_rows}, c.hidden_size));
  }
  out.push_back(plan_linear(p + ".kv_a_proj_with_mqa", i, {p + ".kv_a_proj_with_mqa"}, {a.latent_dim()},
                            c.hidden_size, c.attention_bias));
  out.push_back(plan_linear(p + ".kv_b_proj", i, {p + ".kv_b_proj"},
                            {c.num_heads * (a.qk_nope_head_dim + a.v_head_dim)}, a.kv_lora_rank));
  out.push_back(plan_linear(p + ".o_proj", i, {p + ".o_proj"}, {c.hidden_size}, c.num_heads * a.v_head_dim,
                            c.attention_bias));
}

class DeepseekV3 : public ArchDef {
 public:
  std::string_view hf_name() const override { return "DeepseekV3ForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_deepseek_moe_keys(r, c, defaults());
    read_mla_keys(r, c);
  }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_mla(c, i, out);
    plan_deepseek_moe(c, i, out);
  }
  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    const PreNormNames n = pre_norm_names(i);
    std::vector<LayerParam> out = {{n.input, {c.hidden_size}}, {n.post, {c.hidden_size}}};
    const std::string p = fmt::format("model.layers.{}.self_attn.", i);
    if (c.mla.q_lora_rank > 0) out.push_back({p + "q_a_layernorm.weight", {c.mla.q_lora_rank}});
    out.push_back({p + "kv_a_layernorm.weight", {c.mla.kv_lora_rank}});
    for (LayerParam& q : deepseek_moe_params(c, i)) out.push_back(std::move(q));
    return out;
  }
  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    log_skipped_mtp(b.loader, i);
    return ArchDef::make_layer(b, i);
  }
  std::unique_ptr<Mixer> make_mixer(const LayerBuild& b, int64_t i) const override {
    return std::make_unique<LatentAttention>(b, i);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override { return make_deepseek_moe(l, i); }
  // kv_b_proj stays unquantized, as NVIDIA's newer exports keep it: the attention keeps it
  // dequantized in float32 anyway (no memory saved), and it never runs as a Linear, so
  // calibration could not observe its input.
  std::vector<std::string> default_exclusions(const ModelConfig& c) const override {
    std::vector<std::string> out;
    for (int64_t i = 0; i < c.num_layers; ++i) out.push_back(fmt::format("model.layers.{}.self_attn.kv_b_proj", i));
    return out;
  }
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    deepseek_moe_synthetic_config(o, c);
    // MLA dims from the synthetic head_dim: rope = head_dim / 2, nope = head_dim, v = head_dim.
    c["q_lora_rank"] = 2 * o.head_dim;
    c["kv_lora_rank"] = 2 * o.head_dim;
    c["qk_nope_head_dim"] = o.head_dim;
    c["qk_rope_head_dim"] = o.head_dim / 2;
    c["v_head_dim"] = o.head_dim;
    c["rope_interleave"] = true;
    c["num_key_value_heads"] = o.heads;
    c["head_dim"] = o.head_dim / 2;
    c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64},
                         {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  }

 protected:
  virtual DeepseekMoeDefaults defaults() const { return {}; }
};

// GLM-4.7-Flash: DeepSeek-V3's layer with GLM's defaults; dense layers from mlp_layer_types when given.
class Glm4MoeLite final : public DeepseekV3 {
 public:
  std::string_view hf_name() const override { return "Glm4MoeLiteForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    DeepseekV3::parse_config(r, c);
    read_mlp_layer_types(r, c);
  }

 protected:
  DeepseekMoeDefaults defaults() const override {
    return {.first_k_dense_replace = 1, .routed_scaling_factor = 1.8, .n_group = 1, .topk_group = 1};
  }
};

// Kimi K2.5's wrapper around DeepSeek-V3's text model (the file's comment).
class KimiK25 final : public DeepseekV3 {
 public:
  explicit KimiK25(std::string_view name) : name_(name) {}
  std::string_view hf_name() const override { return name_; }
  std::optional<Wrapper> wrapper() const override {
    return Wrapper{{"text_config"}, "language_model.", /*top_level_tie=*/true};
  }
  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    if (i == 0)
      b.loader.log_once(fmt::format("{}: loading the language model only (language_model.*); the vision tower "
                                    "(vision_tower.*) and its projector (mm_projector.*) are skipped (text input only)",
                                    name_));
    return DeepseekV3::make_layer(b, i);
  }

 private:
  std::string_view name_;
};

}  // namespace

const ArchDef& kimi_k25_arch() {
  static const KimiK25 d("Kimi_K25ForConditionalGeneration");
  return d;
}

const ArchDef& kimi_k25_remote_arch() {
  static const KimiK25 d("KimiK25ForConditionalGeneration");
  return d;
}

const ArchDef& deepseek_v3_arch() {
  static const DeepseekV3 d;
  return d;
}

const ArchDef& glm4_moe_lite_arch() {
  static const Glm4MoeLite d;
  return d;
}

}  // namespace fp4lm::model
