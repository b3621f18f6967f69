// DeciLMForCausalLM (model_type "nemotron-nas"): NVIDIA's Llama-Nemotron models shaped by NAS
// (Llama-3.1-Nemotron-51B, Llama-3.3-Nemotron-Super-49B(-v1.5), Llama-3.1-Nemotron-Ultra-253B),
// with the semantics of their remote code (modeling_decilm.py / block_config.py; vLLM's
// nemotron_nas.py). A Llama decoder whose layers differ, each by its block_configs entry:
//   attention: GQA with num_attention_heads / n_heads_in_group KV heads (its own per layer);
//              no_op: no input_layernorm, no self_attn, nothing added;
//              replace_with_linear: h += self_attn.linear_attn(input_layernorm(h)) (hidden x hidden, no bias)
//   ffn:       SwiGLU of intermediate size round_up(int(2 * ffn_mult * hidden / 3), 256);
//              no_op: no post_attention_layernorm, no mlp; replace_with_linear: h += mlp.linear_mlp(norm(h))
// no_op wins over replace_with_linear (the remote code tests it first). RoPE (llama3 scaling), tied
// embeddings and the rest are Llama's, read by the shared parser; the top-level intermediate_size
// and num_key_value_heads (null in published configs: DeciLMConfig sets them to None) are not read.
// The variable-attention options of block_config.py (sparsify, window_length, num_sink_tokens,
// use_prefill_window_in_sink_attention, unshifted_sink) and a non-gated FFN are refused by name.
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/layers/attention.h"
#include "model/layers/linear.h"
#include "model/layers/mlp.h"
#include "model/load/model_loader.h"
#include "model/arch/sample_shape.h"

namespace fp4lm::model {

namespace {

using Block = DeciLMConfig::Block;
using nlohmann::json;

std::string layer_prefix(int64_t i) { return fmt::format("model.layers.{}", i); }

// block_config.py's _ffn_mult_to_intermediate_size: FFNConfig keeps ffn_mult rounded to 6
// decimals, then int(2 * ffn_mult * hidden / 3) (Python's left-to-right float64 arithmetic,
// truncated) rounded up to a multiple of 256.
int64_t ffn_mult_to_intermediate(double ffn_mult, int64_t hidden) {
  const double m = std::round(ffn_mult * 1e6) / 1e6;
  const auto n = static_cast<int64_t>(2.0 * m * static_cast<double>(hidden) / 3.0);
  return n % 256 == 0 ? n : n + 256 - n % 256;
}

// One sub-block's config object: its no_op / replace_with_linear, every other key checked
// against `known` (a key outside it must be null: an option this engine does not know is refused).
struct SubBlock {
  Block kind = Block::normal;
};

SubBlock read_sub_block(const ConfigReader& r, const json& o, int64_t layer, const char* which,
                        const std::set<std::string>& known) {
  const std::string where = fmt::format("block_configs[{}].{}", layer, which);
  if (!o.is_object()) fail("{}: field '{}' must be an object, found {}", r.path, where, o.dump());
  for (const auto& [k, v] : o.items())
    if (k != "no_op" && k != "replace_with_linear" && !known.count(k) && !v.is_null())
      fail("{}: field '{}.{}' is not supported (found {})", r.path, where, k, v.dump());
  auto flag = [&](const char* k) {
    if (!o.contains(k) || o[k].is_null()) return false;
    if (!o[k].is_boolean()) fail("{}: field '{}.{}' must be a boolean, found {}", r.path, where, k, o[k].dump());
    return o[k].get<bool>();
  };
  SubBlock s;
  if (flag("no_op")) s.kind = Block::no_op;
  else if (flag("replace_with_linear")) s.kind = Block::linear;
  return s;
}

// A key that must be absent, null or `off` (false): the option it turns on is not supported.
void refuse_unless_off(const ConfigReader& r, const json& o, int64_t layer, const char* which, const char* key) {
  if (!o.contains(key) || o[key].is_null() || o[key] == json(false)) return;
  fail("{}: field 'block_configs[{}].{}.{}' = {} is not supported (DeciLM's variable attention / sparsity; only "
       "null or false)",
       r.path, layer, which, key, o[key].dump());
}

// h += linear(x): the replace_with_linear attention, as a mixer (reads no other position).
class LinearMixer final : public Mixer {
 public:
  explicit LinearMixer(std::unique_ptr<Linear> l) : l_(std::move(l)) {}
  void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const override {
    int64_t m = 0;
    for (const SequenceSpan& s : spans) m += s.n;
    l_->forward(x, m, y);
  }
  size_t weight_bytes() const override { return l_->weight_bytes(); }

 private:
  std::unique_ptr<Linear> l_;
};

// The replace_with_linear FFN.
class LinearFfn final : public FeedForward {
 public:
  explicit LinearFfn(std::unique_ptr<Linear> l) : l_(std::move(l)) {}
  void forward(const float* x, int64_t m, float* y) const override { l_->forward(x, m, y); }
  size_t weight_bytes() const override { return l_->weight_bytes(); }

 private:
  std::unique_ptr<Linear> l_;
};

// The pre-norm block with either half possibly absent (a no_op sub-block: no norm, no residual add).
class DeciLayer final : public DecoderLayer {
 public:
  DeciLayer(RmsNorm in, std::unique_ptr<Mixer> mixer, RmsNorm post, std::unique_ptr<FeedForward> ffn)
      : in_(std::move(in)), post_(std::move(post)), mixer_(std::move(mixer)), ffn_(std::move(ffn)) {}
  void forward(const LayerStep& s) const override {
    if (mixer_) add_residual(s, in_, [&](const float* x, float* y) { mixer_->forward(x, s.spans, y); });
    if (ffn_) add_residual(s, post_, [&](const float* x, float* y) { ffn_->forward(x, s.m, y); });
  }
  size_t own_param_bytes() const override {
    return static_cast<size_t>((mixer_ ? in_.dim() : 0) + (ffn_ ? post_.dim() : 0)) * sizeof(float) +
           (mixer_ ? mixer_->own_param_bytes() : 0);
  }

 private:
  RmsNorm in_, post_;
  std::unique_ptr<Mixer> mixer_;
  std::unique_ptr<FeedForward> ffn_;
};

class DeciLM final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "DeciLMForCausalLM"; }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    if (r.opt<bool>("attention_bias", false))
      fail("{}: attention_bias=true is not supported for DeciLMForCausalLM", r.path);
    if (r.opt<bool>("mlp_bias", false)) fail("{}: mlp_bias=true is not supported for DeciLMForCausalLM", r.path);
    if (r.has("position_embedding_type")) {
      const auto t = r.get<std::string>("position_embedding_type");
      // configuration_decilm.py's default "rope" is the Llama rotary embedding; its other forms
      // (mistral_yarn, rope_llama4) and any unknown value are refused, never run as "rope".
      if (t != "rope")
        fail("{}: position_embedding_type '{}' is not supported (only \"rope\", the Llama rotary embedding)", r.path, t);
    }
    if (!r.has("block_configs") || !r.j["block_configs"].is_array())
      fail("{}: DeciLMForCausalLM needs a list 'block_configs' (one entry per layer)", r.path);
    const json& blocks = r.j["block_configs"];
    if (static_cast<int64_t>(blocks.size()) != c.num_layers)
      fail("{}: block_configs has {} entries, expected num_hidden_layers = {}", r.path, blocks.size(), c.num_layers);
    DeciLMConfig& d = c.decilm;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const json& b = blocks[static_cast<size_t>(i)];
      if (!b.is_object() || !b.contains("attention") || !b.contains("ffn"))
        fail("{}: block_configs[{}] must be an object with 'attention' and 'ffn'", r.path, i);
      for (const auto& [k, v] : b.items())
        if (k != "attention" && k != "ffn" && !v.is_null())
          fail("{}: field 'block_configs[{}].{}' is not supported (found {})", r.path, i, k, v.dump());
      const json& a = b["attention"];
      const SubBlock at =
          read_sub_block(r, a, i, "attention",
                         {"n_heads_in_group", "sparsify", "window_length", "num_sink_tokens",
                          "use_prefill_window_in_sink_attention", "unshifted_sink"});
      for (const char* k : {"sparsify", "window_length", "num_sink_tokens", "use_prefill_window_in_sink_attention",
                            "unshifted_sink"})
        refuse_unless_off(r, a, i, "attention", k);
      int64_t kv = 0;
      if (at.kind == Block::normal) {
        const ConfigReader ar{a, r.path};
        if (!ar.has("n_heads_in_group"))
          fail("{}: field 'block_configs[{}].attention.n_heads_in_group' is required for an attention block", r.path, i);
        const auto g = ar.get<int64_t>("n_heads_in_group");
        if (g <= 0 || c.num_heads % g != 0)
          fail("{}: block_configs[{}].attention.n_heads_in_group ({}) must divide num_attention_heads ({})", r.path, i,
               g, c.num_heads);
        kv = c.num_heads / g;
      }
      const json& f = b["ffn"];
      const SubBlock ft = read_sub_block(r, f, i, "ffn", {"ffn_mult", "sparsify", "gated", "hidden_act"});
      refuse_unless_off(r, f, i, "ffn", "sparsify");
      if (f.contains("gated") && !f["gated"].is_null() && f["gated"] != json(true))
        fail("{}: field 'block_configs[{}].ffn.gated' = {} is not supported (only the gated SwiGLU FFN)", r.path, i,
             f["gated"].dump());
      if (f.contains("hidden_act") && !f["hidden_act"].is_null() && f["hidden_act"] != json(c.hidden_act))
        fail("{}: field 'block_configs[{}].ffn.hidden_act' = {} differs from hidden_act '{}' (not supported)", r.path,
             i, f["hidden_act"].dump(), c.hidden_act);
      int64_t inter = 0;
      if (ft.kind == Block::normal) {
        const ConfigReader fr{f, r.path};
        if (!fr.has("ffn_mult"))
          fail("{}: field 'block_configs[{}].ffn.ffn_mult' is required for an FFN block", r.path, i);
        const auto m = fr.get<double>("ffn_mult");
        if (!(m > 0)) fail("{}: block_configs[{}].ffn.ffn_mult must be positive, found {}", r.path, i, m);
        inter = ffn_mult_to_intermediate(m, c.hidden_size);
      }
      d.attn.push_back(at.kind);
      d.ffn.push_back(ft.kind);
      // The attention table carries each layer's KV heads; a no_op or linear block attends nothing.
      if (at.kind == Block::normal) c.attention[i].kv_heads = kv;
      else c.attention[i] = {.kind = AttentionKind::none};
      d.intermediate.push_back(inter);
    }
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    const DeciLMConfig& d = c.decilm;
    const size_t u = static_cast<size_t>(i);
    const std::string a = layer_prefix(i) + ".self_attn", m = layer_prefix(i) + ".mlp";
    if (d.attn[u] == Block::normal) {
      const int64_t q = c.num_heads * c.head_dim, kv = c.attention[i].kv_heads * c.head_dim;
      out.push_back(plan_linear(a + ".qkv_proj", i, {a + ".q_proj", a + ".k_proj", a + ".v_proj"}, {q, kv, kv},
                                c.hidden_size));
      out.push_back(plan_linear(a + ".o_proj", i, {a + ".o_proj"}, {c.hidden_size}, q));
    } else if (d.attn[u] == Block::linear) {
      out.push_back(plan_linear(a + ".linear_attn", i, {a + ".linear_attn"}, {c.hidden_size}, c.hidden_size));
    }
    if (d.ffn[u] == Block::normal)
      plan_dense_mlp(c, i, m, d.intermediate[u], out);
    else if (d.ffn[u] == Block::linear)
      out.push_back(plan_linear(m + ".linear_mlp", i, {m + ".linear_mlp"}, {c.hidden_size}, c.hidden_size));
  }

  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    const PreNormNames n = pre_norm_names(i);
    std::vector<LayerParam> out;
    if (c.decilm.attn[static_cast<size_t>(i)] != Block::no_op) out.push_back({n.input, {c.hidden_size}});
    if (c.decilm.ffn[static_cast<size_t>(i)] != Block::no_op) out.push_back({n.post, {c.hidden_size}});
    return out;
  }

  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    const ModelConfig& c = b.loader.config();
    const size_t u = static_cast<size_t>(i);
    const PreNormNames n = pre_norm_names(i);
    RmsNorm in, post;
    std::unique_ptr<Mixer> mixer;
    if (c.decilm.attn[u] != Block::no_op) {
      in = load_rms_norm(b.loader, n.input, c.hidden_size);
      mixer = make_mixer(b, i);
    }
    std::unique_ptr<FeedForward> ffn;
    if (c.decilm.ffn[u] != Block::no_op) {
      post = load_rms_norm(b.loader, n.post, c.hidden_size);
      ffn = make_ffn(b.loader, i);
    }
    return std::make_unique<DeciLayer>(std::move(in), std::move(mixer), std::move(post), std::move(ffn));
  }

  std::unique_ptr<Mixer> make_mixer(const LayerBuild& b, int64_t i) const override {
    const DeciLMConfig& d = b.loader.config().decilm;
    const size_t u = static_cast<size_t>(i);
    if (d.attn[u] == Block::linear)
      return std::make_unique<LinearMixer>(b.loader.load_linear(layer_prefix(i) + ".self_attn.linear_attn"));
    return std::make_unique<Attention>(b, i, AttentionLayout{.kv_heads = b.loader.config().attention[i].kv_heads});
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    if (l.config().decilm.ffn[static_cast<size_t>(i)] == Block::linear)
      return std::make_unique<LinearFfn>(l.load_linear(layer_prefix(i) + ".mlp.linear_mlp"));
    return std::make_unique<DenseMlp>(l, layer_prefix(i) + ".mlp");
  }

  // A cycle of every block kind (layer 0 a plain block with GQA), so that a synthetic checkpoint
  // of a few layers has each: attention with n_heads_in_group 2, 1 and heads; attention no_op;
  // attention replace_with_linear; ffn no_op; ffn replace_with_linear; two ffn_mult values.
  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["model_type"] = "nemotron-nas";
    c["intermediate_size"] = nullptr;
    c["num_key_value_heads"] = nullptr;
    const json cycle[] = {
        {{"attention", {{"n_heads_in_group", 2}}}, {"ffn", {{"ffn_mult", 1.3125}}}},
        {{"attention", {{"no_op", true}}}, {"ffn", {{"ffn_mult", 2.625}}}},
        {{"attention", {{"replace_with_linear", true}}}, {"ffn", {{"no_op", true}}}},
        {{"attention", {{"n_heads_in_group", 1}}}, {"ffn", {{"replace_with_linear", true}}}},
        {{"attention", {{"n_heads_in_group", o.heads}}}, {"ffn", {{"ffn_mult", 1.0}}}},
    };
    json blocks = json::array();
    for (int64_t i = 0; i < o.layers; ++i) blocks.push_back(cycle[i % 5]);
    c["block_configs"] = blocks;
  }
};

}  // namespace

const ArchDef& decilm_arch() {
  static const DeciLM d;
  return d;
}

}  // namespace fp4lm::model
