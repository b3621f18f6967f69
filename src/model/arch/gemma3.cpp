// Gemma3ForCausalLM and Gemma3ForConditionalGeneration: the text model (its keys under
// text_config, its tensors under model.language_model.) and, for the latter, the SigLIP vision
// tower and projector as the image encoder (model/vision/gemma3_image_encoder.h). transformers' Gemma3TextConfig / modeling_gemma3 semantics:
// - layers of two types (layer_types, or every sliding_window_pattern-th layer full attention):
//   sliding-window attention over the last sliding_window positions (its KV cache a ring) with
//   RoPE base rope_local_base_freq, full attention with rope_theta and rope_scaling (linear);
// - softmax scale query_pre_attn_scalar^-0.5; per-head q_norm / k_norm before RoPE;
// - four norms per layer (arch/gemma.h), every RMSNorm Gemma's x/rms·(1 + w) in float32;
// - embeddings × sqrt(hidden_size) in the activation dtype; gelu_pytorch_tanh GeGLU MLP;
//   optional final_logit_softcapping; tied embeddings by default.
// Published configs omit many keys (the 12B's text_config has no vocab_size or head_dim): they
// get Gemma3TextConfig's defaults (fill_config_defaults).
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "model/arch/gemma.h"
#include "model/layers/attention.h"
#include "model/layers/mlp.h"
#include "model/load/model_loader.h"
#include "model/vision/gemma3_image_encoder.h"

namespace fp4lm::model {

namespace {

class Gemma3 final : public ArchDef {
 public:
  explicit Gemma3(const char* name) : name_(name) {}
  std::string_view hf_name() const override { return name_; }

  void fill_config_defaults(nlohmann::json& j) const override {
    const nlohmann::json defaults = {
        {"vocab_size", 262208},      {"hidden_size", 2304},
        {"intermediate_size", 9216}, {"num_hidden_layers", 26},
        {"num_attention_heads", 8},  {"num_key_value_heads", 4},
        {"head_dim", 256},           {"hidden_activation", "gelu_pytorch_tanh"},
        {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6},
        {"query_pre_attn_scalar", 256}, {"sliding_window", 4096},
        {"rope_local_base_freq", 10000.0}, {"tie_word_embeddings", true},
        {"bos_token_id", 2},         {"eos_token_id", 1}};
    for (const auto& [k, v] : defaults.items())
      if (!j.contains(k)) j[k] = v;
    if (!j.contains("rope_theta") && !j.contains("rope_parameters")) j["rope_theta"] = 1000000.0;
  }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_dense_mlp_keys(r, c);
    c.hidden_act = r.opt<std::string>("hidden_activation", "gelu_pytorch_tanh");
    if (c.hidden_act != "gelu_pytorch_tanh")
      fail("{}: unsupported hidden_activation '{}' (supported: gelu_pytorch_tanh)", r.path, c.hidden_act);
    if (r.opt<bool>("use_bidirectional_attention", false))
      fail("{}: use_bidirectional_attention=true is not supported (causal language models only)", r.path);
    if (r.has("attn_logit_softcapping"))
      fail("{}: attn_logit_softcapping is not supported (Gemma 3 configs set it to null)", r.path);
    c.qk_norm = true;
    c.zero_centered_norm = true;
    c.norm_rounds_once = true;
    c.scale_embeddings = true;
    read_gemma_layer_types(r, c, r.opt<int64_t>("sliding_window_pattern", 6));
    read_gemma_rope(r, c, "rope_local_base_freq", 10000.0);
    const double qpas = r.req<double>("query_pre_attn_scalar");
    if (!(qpas > 0)) fail("{}: field 'query_pre_attn_scalar' must be > 0, found {}", r.path, qpas);
    c.gemma.attention_scaling = 1.0 / std::sqrt(qpas);
    c.final_logit_softcapping = r.opt<double>("final_logit_softcapping", 0.0);
    if (c.final_logit_softcapping < 0)
      fail("{}: field 'final_logit_softcapping' must be > 0 or null", r.path);
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    plan_dense_mlp(c, i, fmt::format("model.layers.{}.mlp", i), c.intermediate_size, out);
  }

  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    const GemmaNormNames n = gemma_norm_names(i);
    const std::string p = fmt::format("model.layers.{}.self_attn.", i);
    return {{n.input, {c.hidden_size}},           {n.post_attention, {c.hidden_size}},
            {n.pre_feedforward, {c.hidden_size}}, {n.post_feedforward, {c.hidden_size}},
            {p + "q_norm.weight", {c.head_dim}},  {p + "k_norm.weight", {c.head_dim}}};
  }

  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    ModelLoader& l = b.loader;
    const ModelConfig& c = l.config();
    const GemmaNormNames n = gemma_norm_names(i);
    std::unique_ptr<Rope> rope = gemma_rope(c, i, c.head_dim);
    const LayerBuild lb{l, *rope, b.state, b.kv_dtype};
    RmsNorm input = load_rms_norm(l, n.input, c.hidden_size);
    auto attention = std::make_unique<Attention>(
        lb, i, AttentionLayout{.window = c.attention[i].sliding_window(), .scaling = c.gemma.attention_scaling});
    RmsNorm post_attention = load_rms_norm(l, n.post_attention, c.hidden_size);
    RmsNorm pre_feedforward = load_rms_norm(l, n.pre_feedforward, c.hidden_size);
    std::unique_ptr<FeedForward> mlp = make_ffn(l, i);
    RmsNorm post_feedforward = load_rms_norm(l, n.post_feedforward, c.hidden_size);
    return std::make_unique<GemmaLayer>(std::move(rope), std::move(input), std::move(attention),
                                        std::move(post_attention), std::move(pre_feedforward), std::move(mlp),
                                        std::move(post_feedforward));
  }

  // Gemma3ForConditionalGeneration's vision_tower.* and multi_modal_projector.* (vision_config);
  // nullptr for Gemma3ForCausalLM or a checkpoint without a tower.
  std::unique_ptr<ImageEncoder> load_image_encoder(ModelLoader& l) const override {
    return Gemma3ImageEncoder::load(l);
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<DenseMlp>(l, fmt::format("model.layers.{}.mlp", i));
  }

  // Gemma's embedding (transformers' Gemma{3,4}TextScaledWordEmbedding) is not an nn.Embedding to
  // ModelOpt, whose export leaves it out of exclude_modules (scripts/validate_modelopt.py).
  bool lists_embedding_as_excluded() const override { return false; }

  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["model_type"] = "gemma3_text";
    c.erase("hidden_act");
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["query_pre_attn_scalar"] = o.head_dim;
    c["sliding_window"] = 8;
    c["rope_theta"] = 1000000.0;
    c["rope_local_base_freq"] = 10000.0;
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < o.layers; ++i) types.push_back((i + 1) % 2 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    c["final_logit_softcapping"] = nullptr;
    c["attn_logit_softcapping"] = nullptr;
  }

 private:
  const char* name_;
};

}  // namespace

const ArchDef& gemma3_arch() {
  static const Gemma3 d("Gemma3ForCausalLM");
  return d;
}
const ArchDef& gemma3_vl_arch() {
  static const Gemma3 d("Gemma3ForConditionalGeneration");
  return d;
}

}  // namespace fp4lm::model
