// Qwen4ExpForCausalLM / Qwen4ExpForConditionalGeneration (Qwen3.8-Flash-Next; transformers 5.24's
// models/qwen4_exp; the wrapper's language model only, text input: its keys under text_config,
// tensors under model.language_model., model.visual.* left unread).
//
// Residual: hc_count streams per token (the embedding copied into each), with a gated
// hyper-connection around each sub-layer (model/layers/gated_residual.h: attn_hyper_connection,
// mlp_hyper_connection); no input / post-attention norms (hc_norm is the norm), and no final norm:
// model.hyper_connection_mixer collapses the streams for lm_head.
// Decoder layer i, by layer_types ("linear_attention", or "indexed_attention" / "full_attention",
// both the indexed kind): a gated delta-net (model/layers/gated_delta_net.h, as Qwen3.5's: in_proj_qkv,
// in_proj_z, in_proj_b, in_proj_a; the gated norm's gate silu, or sigmoid by output_gate_type) or
// Qwen3.5's gated attention restricted by the QSA indexer (model/layers/qsa_attention.h). Layers in
// ple_layer_ids (one-indexed, linear layers only) first add the hashed n-gram Per-Layer Embedding
// (model/layers/ple_ngram_layer.h, model/layers/ngram_embedding.h). Every feed-forward is Qwen3-Next's MoE
// (softmax top-k, renormalized by norm_topk_prob, plus shared_expert × sigmoid(shared_expert_gate)).
// RoPE: rope_parameters (partial_rotary_factor, mrope_section: plain RoPE for text).
// Refused by name: hidden_act other than silu, output_gate_type other than silu / sigmoid,
// attention_bias, a missing or partial QSA config (indexer_*), indexer_kv_heads other than 1,
// indexer_budget not a multiple of indexer_compress_ratio, rotary dims past indexer_head_dim, PLE on
// an attention layer or without eos_token_id, the embeddings input (images) on PLE layers,
// speculative decoding's rewind (the PLE state is not replayable).
// Not read (training-time or derived): router_aux_loss_coef, output_router_logits, initializer_range,
// attention_dropout, number_of_conv_states, use_cache.
#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "model/arch/arch.h"
#include "model/arch/gated_hybrid.h"
#include "model/arch/shared_expert_moe.h"
#include "model/layers/gated_delta_net.h"
#include "model/layers/gated_residual.h"
#include "model/load/model_loader.h"
#include "model/layers/ple_ngram_layer.h"
#include "model/layers/qsa_attention.h"

namespace fp4lm::model {

namespace {

class Qwen4ExpLayer final : public DecoderLayer {
 public:
  Qwen4ExpLayer(const LayerBuild& b, int64_t i, const ArchDef& arch) {
    ModelLoader& l = b.loader;
    const ModelConfig& c = l.config();
    const Qwen4ExpConfig& q = c.qwen4_exp;
    n_ = q.hc_count;
    hidden_ = c.hidden_size;
    if (q.ple[static_cast<size_t>(i)]) {
      int64_t index = 0;
      for (int64_t j = 0; j < i; ++j) index += q.ple[static_cast<size_t>(j)] ? 1 : 0;
      ple_ = std::make_unique<PleNgramLayer>(b, i, index);
    }
    const std::string p = fmt::format("model.layers.{}", i);
    attn_hc_ = GatedResidual(l, p + ".attn_hyper_connection", n_, hidden_, q.hc_lowrank, true);
    mlp_hc_ = GatedResidual(l, p + ".mlp_hyper_connection", n_, hidden_, q.hc_lowrank, true);
    if (c.layer_is_attention(i)) mixer_ = std::make_unique<QsaAttention>(b, i);
    else mixer_ = std::make_unique<GatedDeltaNet>(b, i);
    ffn_ = arch.make_ffn(l, i);
  }

  void forward(const LayerStep& s) const override {
    std::vector<float> inject(static_cast<size_t>(s.m * n_));
    if (ple_) ple_->forward(s.h, s.tokens, s.spans, s.act);
    attn_hc_.weigh(s.h, s.m, s.x, inject.data(), s.act);
    mixer_->forward(s.x, s.spans, s.y);
    attn_hc_.add(s.h, s.m, s.y, inject.data(), s.act);
    mlp_hc_.weigh(s.h, s.m, s.x, inject.data(), s.act);
    ffn_->forward(s.x, s.m, s.y);
    mlp_hc_.add(s.h, s.m, s.y, inject.data(), s.act);
  }

  size_t own_param_bytes() const override {
    return mixer_->own_param_bytes() + attn_hc_.param_bytes() + mlp_hc_.param_bytes() +
           (ple_ ? ple_->param_bytes() : 0);
  }

 private:
  int64_t n_ = 0, hidden_ = 0;
  std::unique_ptr<PleNgramLayer> ple_;
  GatedResidual attn_hc_, mlp_hc_;
  std::unique_ptr<Mixer> mixer_;
  std::unique_ptr<FeedForward> ffn_;
};

class Qwen4Exp final : public ArchDef {
 public:
  explicit Qwen4Exp(const char* name) : name_(name) {}
  std::string_view hf_name() const override { return name_; }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    const std::string& path = r.path;
    if (c.hidden_act != "silu") fail("{}: Qwen4-Exp's hidden_act must be 'silu', found '{}'", path, c.hidden_act);
    if (c.attention_bias) fail("{}: Qwen4-Exp with attention_bias true is not supported", path);
    // layer_types: "indexed_attention" (transformers' name) and "full_attention" (the published
    // configs') are the same indexed layer; read as the hybrid's full_attention.
    nlohmann::json j = r.j;
    if (j.contains("layer_types") && j["layer_types"].is_array())
      for (nlohmann::json& t : j["layer_types"])
        if (t == "indexed_attention") t = "full_attention";
    read_gated_hybrid_keys(ConfigReader{j, path}, c);
    const std::string gate = r.opt<std::string>("output_gate_type", c.hidden_act);
    if (gate != "silu" && gate != "sigmoid")
      fail("{}: output_gate_type '{}' is not supported (supported: silu, sigmoid)", path, gate);
    c.gdn.sigmoid_gate = gate == "sigmoid";
    read_shared_expert_moe_keys(r, c, /*norm_topk_default=*/true);
    if (c.moe.decoder_sparse_step != 1 || !c.moe.mlp_only_layers.empty())
      fail("{}: Qwen4-Exp's layers are all sparse MoE; decoder_sparse_step / mlp_only_layers are not supported", path);

    Qwen4ExpConfig& q = c.qwen4_exp;
    q.hc_count = r.opt<int64_t>("hc_count", 4);
    q.hc_lowrank = r.opt<int64_t>("hc_lowrank", 320);
    if (q.hc_count <= 1) fail("{}: field 'hc_count' must be > 1, found {}", path, q.hc_count);
    r.positive("hc_lowrank", q.hc_lowrank);
    // QSA: every field required (transformers' indexer needs them all).
    for (const char* k : {"indexer_n_heads", "indexer_kv_heads", "indexer_head_dim", "indexer_budget",
                          "indexer_compress_ratio"})
      if (!r.has(k)) fail("{}: missing required field '{}' (Qwen4-Exp's QSA indexer)", path, k);
    q.index_heads = r.get<int64_t>("indexer_n_heads");
    q.index_head_dim = r.get<int64_t>("indexer_head_dim");
    q.index_budget = r.get<int64_t>("indexer_budget");
    q.index_compress_ratio = r.get<int64_t>("indexer_compress_ratio");
    for (auto [k, v] : {std::pair{"indexer_n_heads", q.index_heads}, {"indexer_head_dim", q.index_head_dim},
                        {"indexer_budget", q.index_budget}, {"indexer_compress_ratio", q.index_compress_ratio}})
      r.positive(k, v);
    if (const int64_t kv = r.get<int64_t>("indexer_kv_heads"); kv != 1)
      fail("{}: indexer_kv_heads must be 1 (Qwen4-Exp's QSA has one key head), found {}", path, kv);
    if (q.index_budget % q.index_compress_ratio != 0)
      fail("{}: indexer_budget ({}) must be a multiple of indexer_compress_ratio ({})", path, q.index_budget,
           q.index_compress_ratio);
    if (c.rotary_dim > q.index_head_dim)
      fail("{}: the attention's rotary dims ({}) must fit indexer_head_dim ({})", path, c.rotary_dim,
           q.index_head_dim);
    // PLE.
    q.ple.assign(static_cast<size_t>(c.num_layers), false);
    for (const int64_t id : r.int_list("ple_layer_ids")) {
      if (id < 1 || id > c.num_layers)
        fail("{}: ple_layer_ids holds {} (one-indexed ids in [1, {}])", path, id, c.num_layers);
      if (c.layer_is_attention(id - 1))
        fail("{}: ple_layer_ids holds {}, an attention layer (Qwen4-Exp's PLE is on linear_attention layers only)",
             path, id);
      q.ple[static_cast<size_t>(id - 1)] = true;
    }
    q.ple_embed_dim = r.opt<int64_t>("ple_embed_dim", c.hidden_size);
    q.ple_conv_kernel = r.opt<int64_t>("ple_conv_kernel_size", 4);
    q.ngram_size = r.opt<int64_t>("ngram_size", 3);
    q.heads_per_ngram = r.opt<int64_t>("heads_per_ngram", 8);
    q.ngram_vocab_size_base = r.opt<int64_t>("ngram_vocab_size_base", 20000000);
    q.ngram_vocab_divisor = r.opt<int64_t>("make_ngram_vocab_size_divisible_by", 128);
    q.seed = static_cast<uint64_t>(r.opt<int64_t>("seed", 1234));
    q.split_ngram_parts = r.opt<int64_t>("split_ngram_parts", 512);
    if (std::find(q.ple.begin(), q.ple.end(), true) != q.ple.end()) {
      for (auto [k, v] : {std::pair{"ple_embed_dim", q.ple_embed_dim}, {"ple_conv_kernel_size", q.ple_conv_kernel},
                          {"ngram_vocab_size_base", q.ngram_vocab_size_base},
                          {"make_ngram_vocab_size_divisible_by", q.ngram_vocab_divisor},
                          {"split_ngram_parts", q.split_ngram_parts}})
        r.positive(k, v);
      const int64_t heads = (q.ngram_size - 1) * q.heads_per_ngram;
      if (q.ngram_size < 2 || q.heads_per_ngram <= 0 || q.ple_embed_dim % heads != 0)
        fail("{}: ple_embed_dim ({}) must be a multiple of the n-gram heads (ngram_size - 1) × heads_per_ngram = {} "
             "(ngram_size >= 2)",
             path, q.ple_embed_dim, heads);
      const nlohmann::json& eos = r.has("eos_token_id") ? r.j["eos_token_id"] : nlohmann::json();
      if (eos.is_number_integer()) q.eos_token_id = eos.get<int64_t>();
      else if (eos.is_array() && !eos.empty() && eos[0].is_number_integer()) q.eos_token_id = eos[0].get<int64_t>();
      else fail("{}: field 'eos_token_id' must be set (an id or a list) when ple_layer_ids is", path);
      if (q.eos_token_id < 0 || q.eos_token_id >= c.vocab_size)
        fail("{}: eos_token_id {} outside the vocabulary [0, {})", path, q.eos_token_id, c.vocab_size);
    }
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_gated_hybrid_mixer(c, i, out);
    plan_shared_expert_moe(c, i, fmt::format("model.layers.{}.mlp", i), out);
  }

  // Only the synthetic writer reads these; it does not write Qwen4-Exp.
  std::vector<LayerParam> layer_params(const ModelConfig&, int64_t) const override { return {}; }

  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    return std::make_unique<Qwen4ExpLayer>(b, i, *this);
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return make_shared_expert_moe(l, i, l.config().moe.norm_topk_prob);
  }

  std::unique_ptr<HyperHead> load_hyper_head(ModelLoader& l) const override {
    const ModelConfig& c = l.config();
    return std::make_unique<GatedResidualHead>(l, "model.hyper_connection_mixer", c.qwen4_exp.hc_count,
                                               c.hidden_size, c.qwen4_exp.hc_lowrank);
  }

  std::vector<std::string> default_exclusions(const ModelConfig& c) const override {
    return gated_hybrid_default_exclusions(c);
  }

  void synthetic_config(const SampleShape&, nlohmann::json&) const override {
    fail("fp4lm synth: {} is not supported (use scripts/make_qwen4_exp_goldens.py's checkpoint)", name_);
  }

 private:
  const char* name_;
};

}  // namespace

const ArchDef& qwen4_exp_arch() {
  static const Qwen4Exp d("Qwen4ExpForCausalLM");
  return d;
}
const ArchDef& qwen4_exp_vl_arch() {
  static const Qwen4Exp d("Qwen4ExpForConditionalGeneration");
  return d;
}

}  // namespace fp4lm::model
