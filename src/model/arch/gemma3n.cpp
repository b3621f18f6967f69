// Gemma3nForCausalLM and the language model of Gemma3nForConditionalGeneration (keys under
// text_config, tensors under model.language_model.), as transformers 5.24's Gemma3nTextModel
// computes it on text:
// - altup_num_inputs residual streams (model/layers/altup.h): made from the embedding before layer 0,
//   predicted / corrected around each layer, averaged after the last one;
// - each layer on the active stream's prediction p_a: x = input_layernorm(p_a);
//   a = p_a + post_attention_layernorm(attention(x)); l = (a + laurel(x)) / sqrt(2)
//   (model/layers/laurel.h); o = l + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(l)));
//   the streams corrected with o; then streams 1.. += the per-layer term (arch/gemma_ple.h) of
//   stream a × correct_output_scale (altup_correct_scale);
// - the MLP's width per layer (intermediate_size: one value or one per layer) and its gate's
//   Gaussian top-k (activation_sparsity_pattern, model/layers/gaussian_topk_mlp.h);
// - attention as Gemma 4's small models': q_norm / k_norm, values normed without a weight, softmax
//   scale 1, sliding (sliding_window) and full layers (layer_types, else every 5th full) with the
//   RoPE of their type (rope_parameters), the last num_kv_shared_layers layers reading the K/V of
//   the last earlier layer of their type;
// - RMSNorms x/rms·w (Gemma3nRMSNorm), embeddings × sqrt(hidden_size), per-layer inputs
//   (hidden_size_per_layer_input; ids outside vocab_size_per_layer_input read row 0),
//   final_logit_softcapping, tied embeddings.
// Gemma3nForConditionalGeneration embeds the ids of its vision / audio "hard" token ranges
// (vision_config.vocab_offset .. audio_config.vocab_offset, and from there audio_config.vocab_size
// ids) through model.embed_vision / model.embed_audio (Gemma3nMultimodalEmbedder: embedding,
// hard_embedding_norm, embedding_projection, a weightless norm), as transformers does for text
// input. Its vision tower (timm MobileNetV5), audio tower (USM conformer) and the embedders'
// soft_embedding_norm are not run: no image or audio input (tensor_usage.cpp's ignore list).
// Not supported (an error naming the field): attention_bias, rope types other than
// default / linear. altup_coef_clip clamps coefficients only while training: read, not applied.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "model/layers/altup.h"
#include "model/arch/gemma.h"
#include "model/layers/attention.h"
#include "model/layers/embedding.h"
#include "model/layers/gaussian_topk_mlp.h"
#include "model/layers/laurel.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

// Gemma3nMultimodalEmbedder's hard-token path: ids [offset, offset + vocab) ->
// post_norm(projection(hard_embedding_norm(embedding[id - offset]))).
class HardTokenEmbedder {
 public:
  // A checkpoint without `prefix`embedding.weight keeps the range: its ids are an error, not the
  // text embedding (transformers always builds the embedder).
  static std::unique_ptr<HardTokenEmbedder> load(ModelLoader& l, const std::string& prefix, const char* config_key,
                                                 int64_t default_offset) {
    const nlohmann::json& top = l.checkpoint().config();
    const std::string where = fmt::format("{}/config.json: {}", l.checkpoint().dir(), config_key);
    const nlohmann::json empty = nlohmann::json::object();
    const nlohmann::json& mc = top.contains(config_key) && top[config_key].is_object() ? top[config_key] : empty;
    ConfigReader r{mc, where};
    auto e = std::make_unique<HardTokenEmbedder>();
    e->offset_ = r.opt<int64_t>("vocab_offset", default_offset);
    e->vocab_ = r.opt<int64_t>("vocab_size", 128);
    e->mm_hidden_ = r.opt<int64_t>("hidden_size", std::string(config_key) == "vision_config" ? 2048 : 1536);
    const double eps = r.opt<double>("rms_norm_eps", 1e-6);
    r.positive("vocab_size", e->vocab_);
    r.positive("hidden_size", e->mm_hidden_);
    if (e->offset_ < 0) fail("{}: field 'vocab_offset' must be >= 0, found {}", where, e->offset_);
    if (!l.checkpoint().find(prefix + "embedding.weight")) {
      e->missing_ = l.checkpoint().dir() + ": " + prefix + "embedding.weight";
      return e;
    }
    const int64_t hidden = l.config().hidden_size;
    e->table_ = Embedding(l.tensor(prefix + "embedding.weight", {e->vocab_, e->mm_hidden_}));
    e->norm_ = RmsNorm(l.tensor_f32(prefix + "hard_embedding_norm.weight", {e->mm_hidden_}), eps, true);
    e->post_ = RmsNorm(std::vector<float>(static_cast<size_t>(hidden), 1.0f), eps, true);
    e->proj_ = l.load_extra_linear(
        plan_linear(prefix + "embedding_projection", -1, {prefix + "embedding_projection"}, {hidden}, e->mm_hidden_));
    return e;
  }
  int64_t offset() const { return offset_; }
  int64_t end() const { return offset_ + vocab_; }
  // The embedding of token `id` (in [offset, end)) into out [hidden].
  void embed(int32_t id, float* out, DType act) const {
    if (!missing_.empty())
      fail("Gemma3nForConditionalGeneration: token id {} is a multimodal hard token [{}, {}), but {} is absent", id,
           offset_, end(), missing_);
    std::vector<float> e(static_cast<size_t>(mm_hidden_));
    const int32_t row = id - static_cast<int32_t>(offset_);
    table_.lookup(&row, 1, e.data());
    round_to_dtype(e.data(), e.size(), act);
    norm_.forward(e.data(), 1, e.data(), act);
    proj_->forward(e.data(), 1, out);
    round_to_dtype(out, static_cast<size_t>(post_.dim()), act);
    post_.forward(out, 1, out, act);
  }
  size_t own_param_bytes() const { return missing_.empty() ? static_cast<size_t>(mm_hidden_) * sizeof(float) : 0; }

 private:
  int64_t offset_ = 0, vocab_ = 0, mm_hidden_ = 0;
  std::string missing_;  // the absent embedding tensor, named for the error
  Embedding table_;
  RmsNorm norm_, post_;
  std::unique_ptr<Linear> proj_;
};

// What layer 0 does to the step's embeddings before the streams exist: the hard tokens' rows
// (Gemma3nForConditionalGeneration), the per-layer inputs from them, the other AltUp streams.
struct Gemma3nEntry {
  std::unique_ptr<HardTokenEmbedder> vision, audio;
  std::unique_ptr<AltUpStreams> streams;
};

class Gemma3nLayer final : public DecoderLayer {
 public:
  Gemma3nLayer(ModelLoader& l, int64_t i, std::unique_ptr<Rope> rope, std::unique_ptr<Attention> attention,
               std::unique_ptr<FeedForward> mlp)
      : rope_(std::move(rope)), attention_(std::move(attention)), mlp_(std::move(mlp)), altup_(l, i), laurel_(l, i),
        ple_(l, i) {
    const ModelConfig& c = l.config();
    const GemmaNormNames n = gemma_norm_names(i);
    hidden_ = c.hidden_size;
    n_ = c.gemma3n.altup_inputs;
    active_ = c.gemma3n.altup_active;
    correct_scale_ = c.gemma3n.altup_correct_scale;
    input_ = load_rms_norm(l, n.input, hidden_);
    post_attention_ = load_rms_norm(l, n.post_attention, hidden_);
    pre_feedforward_ = load_rms_norm(l, n.pre_feedforward, hidden_);
    post_feedforward_ = load_rms_norm(l, n.post_feedforward, hidden_);
    if (i == 0) {
      entry_ = std::make_unique<Gemma3nEntry>();
      entry_->streams = std::make_unique<AltUpStreams>(l);
      if (c.architecture == "Gemma3nForConditionalGeneration") {
        // Gemma3nVisionConfig / Gemma3nAudioConfig defaults where the keys are absent.
        entry_->vision = HardTokenEmbedder::load(l, "model.embed_vision.", "vision_config", 262144);
        entry_->audio = HardTokenEmbedder::load(l, "model.embed_audio.", "audio_config", 262272);
      }
    }
  }

  void forward(const LayerStep& s) const override {
    const int64_t m = s.m, H = hidden_, width = n_ * H;
    const auto size = static_cast<size_t>(m * H);
    if (entry_) enter(s);
    std::vector<float> pred(static_cast<size_t>(m * width)), active(size), x(size), side(size), out(size);
    altup_.predict(s.h, m, pred.data(), s.act);
    for (int64_t r = 0; r < m; ++r) std::copy_n(pred.data() + r * width + active_ * H, H, active.data() + r * H);
    input_.forward(active.data(), m, x.data(), s.act);
    laurel_.forward(x.data(), m, side.data(), s.act);
    attention_->forward(x.data(), s.spans, out.data());
    post_attention_.forward(out.data(), m, out.data(), s.act);
    // (p_a + attention + laurel) / sqrt(2), each sum rounded as transformers' tensors are.
    const auto inv_root2 = static_cast<float>(1.0 / std::sqrt(2.0));
    for (size_t i = 0; i < size; ++i) active[i] += out[i];
    round_to_dtype(active.data(), size, s.act);
    for (size_t i = 0; i < size; ++i) active[i] += side[i];
    round_to_dtype(active.data(), size, s.act);
    for (size_t i = 0; i < size; ++i) active[i] *= inv_root2;
    round_to_dtype(active.data(), size, s.act);
    pre_feedforward_.forward(active.data(), m, x.data(), s.act);
    mlp_->forward(x.data(), m, out.data());
    post_feedforward_.forward(out.data(), m, out.data(), s.act);
    for (size_t i = 0; i < size; ++i) active[i] += out[i];
    round_to_dtype(active.data(), size, s.act);
    altup_.correct(pred.data(), active.data(), m, s.h, s.act);
    // The per-layer term of the corrected active stream, added to streams 1.. (not 0).
    for (int64_t r = 0; r < m; ++r) std::copy_n(s.h + r * width + active_ * H, H, x.data() + r * H);
    if (correct_scale_) altup_.scale_output(x.data(), m, x.data(), s.act);
    ple_.term(x.data(), m, out.data(), s.act);
    for (int64_t r = 0; r < m; ++r)
      for (int64_t k = 1; k < n_; ++k) {
        float* hk = s.h + r * width + k * H;
        for (int64_t i = 0; i < H; ++i) hk[i] += out[static_cast<size_t>(r * H + i)];
        round_to_dtype(hk, static_cast<size_t>(H), s.act);
      }
  }

  size_t own_param_bytes() const override {
    size_t b = static_cast<size_t>(4 * hidden_) * sizeof(float) + attention_->own_param_bytes() +
               altup_.own_param_bytes() + laurel_.own_param_bytes() + ple_.own_param_bytes();
    if (entry_)
      for (const auto* e : {entry_->vision.get(), entry_->audio.get()})
        if (e) b += e->own_param_bytes();
    return b;
  }

 private:
  // Layer 0, before anything else: stream 0 holds the step's embeddings.
  void enter(const LayerStep& s) const {
    const int64_t m = s.m, H = hidden_, width = n_ * H;
    std::vector<float> e(static_cast<size_t>(m * H));
    for (int64_t r = 0; r < m; ++r) {
      float* row = s.h + r * width;
      const int32_t id = s.tokens[r];
      const HardTokenEmbedder* mm = nullptr;
      if (entry_->audio && id >= entry_->audio->offset()) mm = entry_->audio.get();
      else if (entry_->vision && id >= entry_->vision->offset()) mm = entry_->vision.get();
      if (mm) {
        if (id >= mm->end())
          fail("Gemma3nForConditionalGeneration: token id {} lies in no multimodal embedder's ids (the nearest "
               "below it, {}, embeds [{}, {}))",
               id, mm == entry_->audio.get() ? "embed_audio" : "embed_vision", mm->offset(), mm->end());
        mm->embed(id, row, s.act);
      }
      std::copy_n(row, H, e.data() + r * H);
    }
    // The per-layer inputs read the embeddings (as transformers' project_per_layer_inputs).
    LayerStep compact = s;
    compact.h = e.data();
    ple_.begin(compact);
    entry_->streams->expand(s.h, m, s.act);
  }

  std::unique_ptr<Rope> rope_;  // the attention's (it keeps a reference)
  std::unique_ptr<Attention> attention_;
  std::unique_ptr<FeedForward> mlp_;
  AltUp altup_;
  Laurel laurel_;
  GemmaPleBlock ple_;
  RmsNorm input_, post_attention_, pre_feedforward_, post_feedforward_;
  std::unique_ptr<Gemma3nEntry> entry_;  // layer 0's
  int64_t hidden_ = 0, n_ = 0, active_ = 0;
  bool correct_scale_ = true;
};

class Gemma3n final : public ArchDef {
 public:
  explicit Gemma3n(const char* name) : name_(name) {}
  std::string_view hf_name() const override { return name_; }

  // Gemma3nTextConfig's defaults (the E4B's shape).
  void fill_config_defaults(nlohmann::json& j) const override {
    const nlohmann::json defaults = {
        {"vocab_size", 262400},      {"hidden_size", 2048},
        {"intermediate_size", 16384}, {"num_hidden_layers", 35},
        {"num_attention_heads", 8},  {"num_key_value_heads", 2},
        {"head_dim", 256},           {"hidden_activation", "gelu_pytorch_tanh"},
        {"max_position_embeddings", 32768}, {"rms_norm_eps", 1e-6},
        {"sliding_window", 512},     {"tie_word_embeddings", true},
        {"final_logit_softcapping", 30.0},
        {"vocab_size_per_layer_input", 262144}, {"hidden_size_per_layer_input", 256},
        {"altup_active_idx", 0},     {"altup_coef_clip", 120.0},
        {"altup_correct_scale", true}, {"altup_num_inputs", 4},
        {"num_kv_shared_layers", 15}, {"laurel_rank", 64},
        {"pad_token_id", 0},         {"bos_token_id", 2},         {"eos_token_id", 1}};
    for (const auto& [k, v] : defaults.items())
      if (!j.contains(k)) j[k] = v;
    // transformers' convert_rope_params_to_dict: rope_theta (full layers, default 1e6) with
    // rope_scaling, rope_local_base_freq (sliding layers, default 1e4).
    if (!j.contains("rope_parameters") || j["rope_parameters"].is_null()) {
      nlohmann::json full = {{"rope_type", "default"}, {"rope_theta", j.value("rope_theta", 1000000.0)}};
      if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) full.update(j["rope_scaling"]);
      j["rope_parameters"] = {
          {"full_attention", full},
          {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", j.value("rope_local_base_freq", 10000.0)}}}};
    }
  }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    c.hidden_act = r.opt<std::string>("hidden_activation", "gelu_pytorch_tanh");
    if (c.hidden_act != "gelu_pytorch_tanh")
      fail("{}: unsupported hidden_activation '{}' (supported: gelu_pytorch_tanh)", r.path, c.hidden_act);
    if (c.attention_bias) fail("{}: attention_bias = true is not supported (Gemma 3n's projections have no bias)", r.path);
    if (r.opt<bool>("use_bidirectional_attention", false))
      fail("{}: use_bidirectional_attention = true is not supported (causal text generation only)", r.path);
    Gemma3nConfig& g = c.gemma3n;
    // intermediate_size: one width for every layer or one per layer.
    const nlohmann::json& is = r.j.contains("intermediate_size") ? r.j["intermediate_size"] : nlohmann::json();
    if (is.is_array()) {
      if (static_cast<int64_t>(is.size()) != c.num_layers)
        fail("{}: field 'intermediate_size' lists {} widths, expected one per layer ({})", r.path, is.size(),
             c.num_layers);
      for (const nlohmann::json& v : is) {
        if (!v.is_number_integer() || v.get<int64_t>() <= 0)
          fail("{}: field 'intermediate_size' must hold positive integers, found {}", r.path, v.dump());
        g.intermediate_sizes.push_back(v.get<int64_t>());
      }
    } else {
      const int64_t w = r.req<int64_t>("intermediate_size");
      r.positive("intermediate_size", w);
      g.intermediate_sizes.assign(static_cast<size_t>(c.num_layers), w);
    }
    c.intermediate_size = *std::max_element(g.intermediate_sizes.begin(), g.intermediate_sizes.end());
    // activation_sparsity_pattern: one value per layer; absent, the first 10 layers 0.95 (when
    // there are more than 10).
    if (r.has("activation_sparsity_pattern")) {
      const nlohmann::json& a = r.j["activation_sparsity_pattern"];
      if (!a.is_array() || static_cast<int64_t>(a.size()) != c.num_layers)
        fail("{}: field 'activation_sparsity_pattern' must list one sparsity per layer ({}), found {}", r.path,
             c.num_layers, a.dump());
      for (const nlohmann::json& v : a) {
        if (!v.is_number() || v.get<double>() < 0 || v.get<double>() >= 1)
          fail("{}: field 'activation_sparsity_pattern' holds {}, expected values in [0, 1)", r.path, v.dump());
        g.activation_sparsity.push_back(v.get<double>());
      }
    } else {
      for (int64_t i = 0; i < c.num_layers; ++i) g.activation_sparsity.push_back(c.num_layers > 10 && i < 10 ? 0.95 : 0.0);
    }
    g.altup_inputs = r.req<int64_t>("altup_num_inputs");
    r.positive("altup_num_inputs", g.altup_inputs);
    g.altup_active = r.req<int64_t>("altup_active_idx");
    if (g.altup_active < 0 || g.altup_active >= g.altup_inputs)
      fail("{}: altup_active_idx = {} must be in [0, altup_num_inputs = {})", r.path, g.altup_active, g.altup_inputs);
    if (r.has("altup_coef_clip") && !(r.get<double>("altup_coef_clip") > 0))
      fail("{}: field 'altup_coef_clip' must be > 0 or null", r.path);
    g.altup_correct_scale = r.opt<bool>("altup_correct_scale", true);
    g.laurel_rank = r.req<int64_t>("laurel_rank");
    r.positive("laurel_rank", g.laurel_rank);
    c.gemma.ple_dim = r.req<int64_t>("hidden_size_per_layer_input");
    r.positive("hidden_size_per_layer_input", c.gemma.ple_dim);
    c.gemma.ple_vocab = r.req<int64_t>("vocab_size_per_layer_input");
    r.positive("vocab_size_per_layer_input", c.gemma.ple_vocab);
    c.qk_norm = true;
    c.norm_rounds_once = true;
    c.scale_embeddings = true;
    read_gemma_layer_types(r, c, 5);
    read_gemma_rope(r, c, "rope_local_base_freq", 10000.0);
    for (const RopeScaling* s : {&c.rope_scaling, &c.gemma.local_rope_scaling})
      if (s->type == "proportional")
        fail("{}: rope_parameters: rope_type 'proportional' is Gemma 4's, not Gemma 3n's (supported: default, linear)",
             r.path);
    c.gemma.attention_scaling = 1.0;
    c.gemma.v_norm = true;
    read_gemma_kv_sharing(r, c);
    c.final_logit_softcapping = r.opt<double>("final_logit_softcapping", 0.0);
    if (c.final_logit_softcapping < 0) fail("{}: field 'final_logit_softcapping' must be > 0 or null", r.path);
  }

  static int64_t source_of(const ModelConfig& c, int64_t i) { return c.attention[i].kv_source; }
  static int64_t width_of(const ModelConfig& c, int64_t i) {
    return c.gemma3n.intermediate_sizes[static_cast<size_t>(i)];
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim, H = c.hidden_size;
    const std::string p = fmt::format("model.layers.{}.self_attn", i);
    if (source_of(c, i) >= 0)  // reads an earlier layer's K/V: no k_proj / v_proj
      out.push_back(plan_linear(p + ".qkv_proj", i, {p + ".q_proj"}, {q}, H));
    else
      out.push_back(plan_linear(p + ".qkv_proj", i, {p + ".q_proj", p + ".k_proj", p + ".v_proj"}, {q, kv, kv}, H));
    out.push_back(plan_linear(p + ".o_proj", i, {p + ".o_proj"}, {H}, q));
    plan_dense_mlp(c, i, fmt::format("model.layers.{}.mlp", i), width_of(c, i), out);
    plan_gemma_ple(c, i, out);
    plan_laurel(H, c.gemma3n.laurel_rank, i, out);
    const std::string a = fmt::format("model.layers.{}.altup.modality_router", i);
    out.push_back(plan_linear(a, i, {a}, {c.gemma3n.altup_inputs}, H));
    plan_altup(c.gemma3n.altup_inputs, H, i, c.num_layers, out);
  }

  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    const GemmaNormNames n = gemma_norm_names(i);
    const std::string p = fmt::format("model.layers.{}.", i);
    const int64_t H = c.hidden_size, A = c.gemma3n.altup_inputs;
    std::vector<LayerParam> out = {{n.input, {H}},
                                   {n.post_attention, {H}},
                                   {n.pre_feedforward, {H}},
                                   {n.post_feedforward, {H}},
                                   {p + "self_attn.q_norm.weight", {c.head_dim}},
                                   {p + "laurel.post_laurel_norm.weight", {H}},
                                   {p + "altup.router_norm.weight", {H}},
                                   {p + "altup.prediction_coefs.weight", {A * A, A}},
                                   {p + "altup.correction_coefs.weight", {A, A}},
                                   {p + "altup.correct_output_scale", {H}}};
    if (source_of(c, i) < 0) out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
    const GemmaPleNames pn = gemma_ple_names(i);
    out.push_back({pn.post_norm, {H}});
    if (i == 0) {  // the model's own PLE tensors, loaded with layer 0
      out.push_back({pn.table, {c.gemma.ple_vocab, c.num_layers * c.gemma.ple_dim}});
      out.push_back({pn.projection_norm, {c.gemma.ple_dim}});
    }
    return out;
  }

  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    ModelLoader& l = b.loader;
    const ModelConfig& c = l.config();
    if (i == 0 && c.tensor_prefix != "model.")
      l.log_once(fmt::format("{}: the vision and audio towers are skipped (text input only; the ids of their hard "
                             "token ranges are embedded by embed_vision / embed_audio)",
                             c.architecture));
    std::unique_ptr<Rope> rope = gemma_rope(c, i, c.head_dim);
    const LayerBuild lb{l, *rope, b.state, b.kv_dtype};
    const int64_t source = source_of(c, i);
    auto attention = std::make_unique<Attention>(lb, i,
                                                 AttentionLayout{.window = c.attention[i].sliding_window(),
                                                                 .reads_kv_of = source,
                                                                 .scaling = 1.0,
                                                                 .v_norm = source < 0,
                                                                 .q_only = source >= 0,
                                                                 .image_blocks = false});
    return std::make_unique<Gemma3nLayer>(l, i, std::move(rope), std::move(attention), make_ffn(l, i));
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<GaussianTopkMlp>(l, fmt::format("model.layers.{}.mlp", i),
                                             l.config().gemma3n.activation_sparsity[static_cast<size_t>(i)]);
  }

  std::unique_ptr<HyperHead> load_hyper_head(ModelLoader& l) const override {
    return std::make_unique<AltUpHead>(l);
  }

  // Gemma's scaled embedding is not an nn.Embedding to ModelOpt (as Gemma 3 / 4).
  bool lists_embedding_as_excluded() const override { return false; }

  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["model_type"] = "gemma3n_text";
    c.erase("hidden_act");
    c.erase("rope_theta");
    c["hidden_activation"] = "gelu_pytorch_tanh";
    c["sliding_window"] = 8;
    c["hidden_size_per_layer_input"] = 16;  // NVFP4 blocks of 16 along every Linear's input
    c["vocab_size_per_layer_input"] = c["vocab_size"];
    c["altup_num_inputs"] = 4;
    c["altup_active_idx"] = 0;
    c["laurel_rank"] = 16;
    c["num_kv_shared_layers"] = 0;
    c["final_logit_softcapping"] = 30.0;
    nlohmann::json types = nlohmann::json::array(), sparsity = nlohmann::json::array();
    for (int64_t i = 0; i < o.layers; ++i) {
      types.push_back((i + 1) % 2 ? "sliding_attention" : "full_attention");
      sparsity.push_back(i == 0 ? 0.95 : 0.0);
    }
    c["layer_types"] = types;
    c["activation_sparsity_pattern"] = sparsity;
    c["rope_parameters"] = {{"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                            {"full_attention", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}}};
  }

 private:
  const char* name_;
};

}  // namespace

const ArchDef& gemma3n_arch() {
  static const Gemma3n d("Gemma3nForCausalLM");
  return d;
}
const ArchDef& gemma3n_vl_arch() {
  static const Gemma3n d("Gemma3nForConditionalGeneration");
  return d;
}

}  // namespace fp4lm::model
