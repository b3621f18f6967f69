// Gemma4ForCausalLM and the language model of Gemma4ForConditionalGeneration (keys under
// text_config, tensors under model.language_model.; the vision tower and embed_vision load as the
// model's ImageEncoder, model/vision/gemma4_image_encoder.h; the audio tower and embed_audio are
// never loaded, one INFO line says so), with
// transformers' Gemma4TextConfig / modeling_gemma4 semantics for what the dense releases
// (Gemma-4-31B) use:
// - layer_types (sliding : full, the last layer always full), sliding_window;
// - the full layers' own head dimension (global_head_dim) and, with attention_k_eq_v, their own
//   KV-head count (num_global_key_value_heads) and no v_proj: the values are the key
//   projection's output, before k_norm and RoPE;
// - RoPE per layer type from rope_parameters: default on the sliding layers, `proportional`
//   (partial_rotary_factor of the frequency pairs rotate) on the full layers;
// - q_norm / k_norm, and the values RMS-normalized without a weight (v_norm); softmax scale 1;
// - four norms per layer (arch/gemma.h), Gemma 4's RMSNorm x/rms·w in float32 (not 1 + w);
//   each layer's output × its layer_scalar;
// - embeddings × sqrt(hidden_size), gelu_pytorch_tanh GeGLU, final_logit_softcapping, tied
//   embeddings;
// - the MoE block of the 26B-A4B (enable_moe_block: num_experts, top_k_experts,
//   moe_intermediate_size): router and GELU-tanh experts beside the dense MLP (arch/gemma_moe.h).
// - the small models' features (E2B / E4B; in no NVIDIA-published config): per-layer input
//   embeddings (hidden_size_per_layer_input > 0, arch/gemma_ple.h), the last
//   num_kv_shared_layers layers reading the K/V of the last earlier layer of their type (no
//   k_proj / v_proj / k_norm of their own), use_double_wide_mlp (those layers' MLPs 2 × wide).
// Not supported (an error naming the field): use_bidirectional_attention "all".
#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "core/error.h"
#include "model/arch/gemma.h"
#include "model/layers/attention.h"
#include "model/layers/mlp.h"
#include "model/load/model_loader.h"
#include "model/vision/gemma4_image_encoder.h"

namespace fp4lm::model {

namespace {

class Gemma4 final : public ArchDef {
 public:
  explicit Gemma4(const char* name) : name_(name) {}
  std::string_view hf_name() const override { return name_; }

  void fill_config_defaults(nlohmann::json& j) const override {
    const nlohmann::json defaults = {
        {"vocab_size", 262144},      {"hidden_size", 2304},
        {"intermediate_size", 9216}, {"num_hidden_layers", 30},
        {"num_attention_heads", 8},  {"num_key_value_heads", 4},
        {"head_dim", 256},           {"hidden_activation", "gelu_pytorch_tanh"},
        {"max_position_embeddings", 131072}, {"rms_norm_eps", 1e-6},
        {"sliding_window", 512},     {"tie_word_embeddings", true},
        {"hidden_size_per_layer_input", 256},
        {"bos_token_id", 2},         {"eos_token_id", 1}};
    for (const auto& [k, v] : defaults.items())
      if (!j.contains(k)) j[k] = v;
    if (!j.contains("rope_parameters") || j["rope_parameters"].is_null())
      j["rope_parameters"] = {
          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
          {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}};
  }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_dense_mlp_keys(r, c);
    c.hidden_act = r.opt<std::string>("hidden_activation", "gelu_pytorch_tanh");
    if (c.hidden_act != "gelu_pytorch_tanh")
      fail("{}: unsupported hidden_activation '{}' (supported: gelu_pytorch_tanh)", r.path, c.hidden_act);
    // "vision" (the 26B-A4B / 31B configs) makes an image's tokens attend to each other on the
    // sliding layers (transformers' create_masks_for_vision_model; text stays causal). "all" is
    // the bidirectional (embedding) variant.
    c.gemma.vision_bidir = r.has("use_bidirectional_attention");
    if (c.gemma.vision_bidir && r.get<std::string>("use_bidirectional_attention") != "vision")
      fail("{}: use_bidirectional_attention = '{}' is not supported (causal text generation only; \"vision\" "
           "is accepted, since text-only input is causal under it)",
           r.path, r.get<std::string>("use_bidirectional_attention"));
    c.gemma.ple_dim = r.opt<int64_t>("hidden_size_per_layer_input", 0);
    if (c.gemma.ple_dim < 0) fail("{}: field 'hidden_size_per_layer_input' must be >= 0", r.path);
    if (c.gemma.ple_dim > 0) {
      c.gemma.ple_vocab = r.opt<int64_t>("vocab_size_per_layer_input", 262144);
      r.positive("vocab_size_per_layer_input", c.gemma.ple_vocab);
    }
    c.gemma.double_wide_mlp = r.opt<bool>("use_double_wide_mlp", false);
    if (r.opt<bool>("enable_moe_block", false)) {
      c.gemma.moe = true;
      c.moe.num_experts = r.req<int64_t>("num_experts");
      r.positive("num_experts", c.moe.num_experts);
      c.moe.top_k = r.req<int64_t>("top_k_experts");
      if (c.moe.top_k <= 0 || c.moe.top_k > c.moe.num_experts)
        fail("{}: top_k_experts = {} must be in [1, num_experts = {}]", r.path, c.moe.top_k, c.moe.num_experts);
      c.moe.moe_intermediate_size = r.req<int64_t>("moe_intermediate_size");
      r.positive("moe_intermediate_size", c.moe.moe_intermediate_size);
      c.moe.norm_topk_prob = true;  // Gemma4TextRouter always renormalizes the top-k weights
    }
    c.qk_norm = true;
    c.norm_rounds_once = true;
    c.scale_embeddings = true;
    read_gemma_layer_types(r, c, 6);
    c.attention[c.num_layers - 1] = {};  // transformers forces the last layer to full attention
    read_gemma_rope(r, c, "rope_local_base_freq", 10000.0);
    c.gemma.attention_scaling = 1.0;
    c.final_logit_softcapping = r.opt<double>("final_logit_softcapping", 0.0);
    if (c.final_logit_softcapping < 0) fail("{}: field 'final_logit_softcapping' must be > 0 or null", r.path);
    // The full layers' head_dim and KV heads: transformers 5.24 saves them per layer
    // (per_layer_config {"<i>": {head_dim, num_key_value_heads}}, the indices zero-padded to the
    // widest one's digits: "05" of 30 layers), earlier configs as global_head_dim and (with
    // attention_k_eq_v) num_global_key_value_heads.
    c.gemma.full_k_eq_v = r.opt<bool>("attention_k_eq_v", false);
    const bool per_layer = r.has("per_layer_config");
    std::map<int64_t, const nlohmann::json*> overrides;
    if (per_layer) {
      if (!r.j["per_layer_config"].is_object())
        fail("{}: field 'per_layer_config' must be an object of layer index -> overrides", r.path);
      for (const auto& [key, e] : r.j["per_layer_config"].items()) {
        const bool digits = !key.empty() && key.size() < 10 &&
                            std::all_of(key.begin(), key.end(), [](char ch) { return ch >= '0' && ch <= '9'; });
        const int64_t idx = digits ? std::stoll(key) : -1;
        if (idx < 0 || idx >= c.num_layers)
          fail("{}: field 'per_layer_config' has key '{}', expected a layer index in [0, {})", r.path, key,
               c.num_layers);
        if (!e.is_object()) fail("{}: field 'per_layer_config.{}' must be an object", r.path, key);
        if (!overrides.emplace(idx, &e).second)
          fail("{}: field 'per_layer_config' names layer {} twice", r.path, idx);
      }
    }
    const int64_t global_hd = r.opt<int64_t>("global_head_dim", 512);
    const int64_t global_kvh = c.gemma.full_k_eq_v ? r.opt<int64_t>("num_global_key_value_heads", c.num_kv_heads)
                                                   : c.num_kv_heads;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      int64_t hd = c.head_dim, kvh = c.num_kv_heads;
      if (per_layer) {
        if (auto it = overrides.find(i); it != overrides.end()) {
          ConfigReader er{*it->second, r.path};
          hd = er.opt<int64_t>("head_dim", hd);
          kvh = er.opt<int64_t>("num_key_value_heads", kvh);
        }
      } else if (c.attention[i].kind != AttentionKind::sliding) {
        hd = global_hd;
        kvh = global_kvh;
      }
      if (hd <= 0 || hd % 2 != 0 || kvh <= 0 || c.num_heads % kvh != 0)
        fail("{}: layer {}: head_dim {} must be positive and even, and num_attention_heads ({}) a multiple of its {} "
             "KV heads (global_head_dim / num_global_key_value_heads / per_layer_config)",
             r.path, i, hd, c.num_heads, kvh);
      c.attention[i].head_dim = hd;
      c.attention[i].kv_heads = kvh;
    }
    c.gemma.v_norm = true;
    c.gemma.layer_scalar = true;
    read_gemma_kv_sharing(r, c);
  }

  // Layer i's attention shape: head_dim, KV heads, keys doubling as values.
  struct Shape {
    int64_t head_dim, kv_heads;
    bool k_eq_v;
  };
  static Shape shape(const ModelConfig& c, int64_t i) {
    const AttentionLayerSpec& a = c.attention[i];
    return {a.head_dim, a.kv_heads, c.gemma.full_k_eq_v && a.kind != AttentionKind::sliding};
  }
  static int64_t source_of(const ModelConfig& c, int64_t i) { return c.attention[i].kv_source; }
  static int64_t mlp_inter(const ModelConfig& c, int64_t i) {
    return c.intermediate_size * (c.gemma.double_wide_mlp && source_of(c, i) >= 0 ? 2 : 1);
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    const Shape s = shape(c, i);
    const int64_t q = c.num_heads * s.head_dim, kv = s.kv_heads * s.head_dim;
    const std::string p = fmt::format("model.layers.{}.self_attn", i);
    if (source_of(c, i) >= 0)  // reads an earlier layer's K/V: no k_proj / v_proj
      out.push_back(plan_linear(p + ".qkv_proj", i, {p + ".q_proj"}, {q}, c.hidden_size));
    else if (s.k_eq_v)
      out.push_back(plan_linear(p + ".qkv_proj", i, {p + ".q_proj", p + ".k_proj"}, {q, kv}, c.hidden_size));
    else
      out.push_back(plan_linear(p + ".qkv_proj", i, {p + ".q_proj", p + ".k_proj", p + ".v_proj"}, {q, kv, kv},
                                c.hidden_size));
    out.push_back(plan_linear(p + ".o_proj", i, {p + ".o_proj"}, {c.hidden_size}, q));
    plan_dense_mlp(c, i, fmt::format("model.layers.{}.mlp", i), mlp_inter(c, i), out);
    if (c.gemma.moe) plan_gemma_moe(c, i, out);
    if (c.gemma.ple_dim > 0) plan_gemma_ple(c, i, out);
  }

  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    const GemmaNormNames n = gemma_norm_names(i);
    const std::string p = fmt::format("model.layers.{}.", i);
    const int64_t hd = shape(c, i).head_dim;
    std::vector<LayerParam> out = {{n.input, {c.hidden_size}},           {n.post_attention, {c.hidden_size}},
                                   {n.pre_feedforward, {c.hidden_size}}, {n.post_feedforward, {c.hidden_size}},
                                   {p + "self_attn.q_norm.weight", {hd}}, {p + "layer_scalar", {1}}};
    if (source_of(c, i) < 0) out.push_back({p + "self_attn.k_norm.weight", {hd}});
    if (c.gemma.ple_dim > 0) {
      const GemmaPleNames pn = gemma_ple_names(i);
      out.push_back({pn.post_norm, {c.hidden_size}});
      if (i == 0) {  // the model's own PLE tensors, loaded with layer 0
        out.push_back({pn.table, {c.gemma.ple_vocab, c.num_layers * c.gemma.ple_dim}});
        out.push_back({pn.projection_norm, {c.gemma.ple_dim}});
      }
    }
    if (c.gemma.moe) {
      const GemmaMoeNames mn = gemma_moe_names(i);
      for (const std::string& norm : {mn.post_feedforward_1, mn.pre_feedforward_2, mn.post_feedforward_2})
        out.push_back({norm, {c.hidden_size}});
      out.push_back({mn.router_scale, {c.hidden_size}});
      out.push_back({mn.per_expert_scale, {c.moe.num_experts}});
    }
    return out;
  }

  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    ModelLoader& l = b.loader;
    const ModelConfig& c = l.config();
    if (i == 0 && c.tensor_prefix != "model.")
      l.log_once(fmt::format("{}: the audio tower and its embedder are skipped (no audio input)",
                             c.architecture));
    const GemmaNormNames n = gemma_norm_names(i);
    const Shape s = shape(c, i);
    std::unique_ptr<Rope> rope = gemma_rope(c, i, s.head_dim);
    const bool sliding = c.attention[i].kind == AttentionKind::sliding;
    const LayerBuild lb{l, *rope, b.state, b.kv_dtype};
    RmsNorm input = load_rms_norm(l, n.input, c.hidden_size);
    const int64_t source = source_of(c, i);
    auto attention = std::make_unique<Attention>(lb, i,
                                                 AttentionLayout{.window = c.attention[i].sliding_window(),
                                                                 .reads_kv_of = source,
                                                                 .scaling = 1.0,
                                                                 .head_dim = s.head_dim,
                                                                 .kv_heads = s.kv_heads,
                                                                 .k_eq_v = source < 0 && s.k_eq_v,
                                                                 .v_norm = source < 0,
                                                                 .q_only = source >= 0,
                                                                 .image_blocks = sliding && c.gemma.vision_bidir});
    RmsNorm post_attention = load_rms_norm(l, n.post_attention, c.hidden_size);
    RmsNorm pre_feedforward = load_rms_norm(l, n.pre_feedforward, c.hidden_size);
    std::unique_ptr<FeedForward> mlp = make_ffn(l, i);
    RmsNorm post_feedforward = load_rms_norm(l, n.post_feedforward, c.hidden_size);
    std::unique_ptr<GemmaMoeBlock> moe = c.gemma.moe ? std::make_unique<GemmaMoeBlock>(l, i) : nullptr;
    std::unique_ptr<GemmaPleBlock> ple = c.gemma.ple_dim > 0 ? std::make_unique<GemmaPleBlock>(l, i) : nullptr;
    const float scalar = l.tensor_f32(fmt::format("model.layers.{}.layer_scalar", i), {1})[0];
    return std::make_unique<GemmaLayer>(std::move(rope), std::move(input), std::move(attention),
                                        std::move(post_attention), std::move(pre_feedforward), std::move(mlp),
                                        std::move(post_feedforward), scalar, std::move(moe), std::move(ple));
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<DenseMlp>(l, fmt::format("model.layers.{}.mlp", i));
  }

  // Gemma4ForConditionalGeneration's vision_tower.* and embed_vision.* (vision_config); nullptr
  // for Gemma4ForCausalLM or a checkpoint without a tower. (On the per-layer-embedding models the
  // image tokens' per-layer inputs are pad_token_id's: GemmaPleInputs.)
  std::unique_ptr<ImageEncoder> load_image_encoder(ModelLoader& l) const override {
    return Gemma4ImageEncoder::load(l);
  }

  // Gemma's embedding (transformers' Gemma{3,4}TextScaledWordEmbedding) is not an nn.Embedding to
  // ModelOpt, whose export leaves it out of exclude_modules (scripts/validate_modelopt.py).
  bool lists_embedding_as_excluded() const override { return false; }

  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["model_type"] = "gemma4_text";
    c.erase("hidden_act");
    c.erase("rope_theta");
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["sliding_window"] = 8;
    c["global_head_dim"] = 2 * o.head_dim;  // the published configs' form
    c["attention_k_eq_v"] = true;
    c["num_global_key_value_heads"] = 1;
    c["hidden_size_per_layer_input"] = o.ple_dim;
    if (o.ple_dim > 0) c["vocab_size_per_layer_input"] = c["vocab_size"];
    c["num_kv_shared_layers"] = o.kv_shared_layers;
    c["enable_moe_block"] = false;
    c["final_logit_softcapping"] = 30.0;
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < o.layers; ++i) types.push_back((i + 1) % 2 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    c["rope_parameters"] = {
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
        {"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}}}};
  }

 private:
  const char* name_;
};

}  // namespace

const ArchDef& gemma4_arch() {
  static const Gemma4 d("Gemma4ForCausalLM");
  return d;
}
const ArchDef& gemma4_vl_arch() {
  static const Gemma4 d("Gemma4ForConditionalGeneration");
  return d;
}

}  // namespace fp4lm::model
