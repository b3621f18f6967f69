// Llama4ForCausalLM and Llama4ForConditionalGeneration (Llama 4 Scout / Maverick, NVIDIA's
// nvidia/Llama-4-*-FP4) as transformers' modeling_llama4 computes the text model:
//  - the pre-norm block (input_layernorm, post_attention_layernorm) with the attention of
//    model/layers/llama4_attention.h: RoPE layers (no_rope_layers[i] = 1; default every layer but each
//    no_rope_layer_interval-th) rotate q/k in the interleaved (complex) form with Llama 4's rope
//    (rope_theta, rope_scaling llama3), L2-normalize them (use_qk_norm) and attend within chunks
//    of attention_chunk_size positions (layer_types "chunked_attention"); NoPE layers attend to
//    every earlier position with the query temperature (attn_temperature_tuning, floor_scale,
//    attn_scale);
//  - `feed_forward`: on the MoE layers (moe_layers, default every interleave_moe_layer_step-th)
//    a router Linear (`router`, unquantized) whose top num_experts_per_tok logits are scored by
//    sigmoid, each chosen expert run on the input scaled by its score (the score scales the
//    expert's input, not its output), plus a dense shared expert (`shared_expert`, intermediate_size);
//    the experts as transformers saves them, two fused input-major parameters
//    `experts.gate_up_proj` [E, D, 2I] (gate columns, then up) and `experts.down_proj` [E, I, D],
//    or per expert (`experts.<e>.{gate,up,down}_proj`, how fp4lm quantize and the synthetic writer
//    store NVFP4 experts); on the other layers a dense MLP of intermediate_size_mlp.
// The wrapper (Llama4ForConditionalGeneration) keeps the text config under text_config and the
// text model under `language_model.` (language_model.model.*, language_model.lm_head.weight); its
// vision tower (vision_model.*, multi_modal_projector.*) is not run and stays on the load rule's
// ignore list.
#include <cmath>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "io/checkpoint.h"
#include "model/layers/activation.h"
#include "model/arch/arch.h"
#include "model/layers/linear.h"
#include "model/layers/llama4_attention.h"
#include "model/layers/mlp.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

// Llama4TextMoe: shared expert + each token's top-k experts, expert e run on x · sigmoid(logit_e).
class Llama4Moe final : public FeedForward {
 public:
  Llama4Moe(ModelLoader& l, const std::string& block) : act_(l.dtype()) {
    const ModelConfig& c = l.config();
    num_experts_ = c.moe.num_experts;
    top_k_ = c.moe.top_k;
    hidden_ = c.hidden_size;
    router_ = l.load_linear(block + ".router");
    // ModelOpt's export of the fused Llama4TextExperts keeps them fused and quantized, each
    // parameter transposed to input-major after packing ([E, D/2, 2I] U8 + `_weight_scale`
    // [E, D/16, 2I]); fp4lm reads NVFP4 experts per expert only, so say so rather than fail on a
    // missing per-expert tensor.
    const std::string fused = block + ".experts.gate_up_proj_weight_scale";
    if (l.checkpoint().find(fused))
      fail("{}: tensor '{}': Llama 4's fused quantized experts (ModelOpt's Llama4TextExperts export) are not "
           "supported; fp4lm reads quantized experts per expert (experts.<e>.gate_proj / up_proj / down_proj)",
           l.checkpoint().dir(), fused);
    experts_ = l.load_moe(block + ".experts");
    shared_ = std::make_unique<DenseMlp>(l, block + ".shared_expert");
  }

  void forward(const float* x, int64_t m, float* y) const override {
    std::vector<float> logits(static_cast<size_t>(m * num_experts_));
    router_->forward(x, m, logits.data());
    round_to_dtype(logits.data(), logits.size(), act_);
    // One row per (token, chosen expert): its input scaled by the score, routed to that expert alone.
    const int64_t rows = m * top_k_;
    std::vector<float> xs(static_cast<size_t>(rows * hidden_)), ys(xs.size()), ones(static_cast<size_t>(rows), 1.0f);
    std::vector<int32_t> ids(static_cast<size_t>(rows));
    std::vector<char> taken(static_cast<size_t>(num_experts_));
    for (int64_t t = 0; t < m; ++t) {
      const float* lt = logits.data() + t * num_experts_;
      std::fill(taken.begin(), taken.end(), 0);
      for (int64_t j = 0; j < top_k_; ++j) {
        int64_t best = -1;
        for (int64_t e = 0; e < num_experts_; ++e)
          if (!taken[static_cast<size_t>(e)] && (best < 0 || lt[e] > lt[best])) best = e;
        taken[static_cast<size_t>(best)] = 1;
        float score = 1.0f / (1.0f + std::exp(-lt[best]));
        round_to_dtype(&score, 1, act_);
        const int64_t r = t * top_k_ + j;
        ids[static_cast<size_t>(r)] = static_cast<int32_t>(best);
        for (int64_t d = 0; d < hidden_; ++d) xs[static_cast<size_t>(r * hidden_ + d)] = x[t * hidden_ + d] * score;
      }
    }
    round_to_dtype(xs.data(), xs.size(), act_);
    experts_->forward(xs.data(), rows, ids.data(), ones.data(), 1, ys.data());
    shared_->forward(x, m, y);
    for (int64_t t = 0; t < m; ++t)
      for (int64_t j = 0; j < top_k_; ++j) {
        const float* yr = ys.data() + (t * top_k_ + j) * hidden_;
        for (int64_t d = 0; d < hidden_; ++d) y[t * hidden_ + d] += yr[d];
      }
    round_to_dtype(y, static_cast<size_t>(m * hidden_), act_);
  }

  size_t weight_bytes() const override {
    return router_->weight_bytes() + experts_->weight_bytes() + shared_->weight_bytes();
  }

 private:
  std::unique_ptr<Linear> router_;
  std::unique_ptr<FusedMoe> experts_;
  std::unique_ptr<DenseMlp> shared_;
  int64_t num_experts_, top_k_, hidden_;
  DType act_;
};

// A per-layer list of 0/1 (or booleans) of at least num_layers entries.
std::vector<bool> layer_flags(const ConfigReader& r, const char* key, int64_t layers) {
  const nlohmann::json& v = r.j[key];
  if (!v.is_array() || static_cast<int64_t>(v.size()) < layers)
    fail("{}: field '{}' must list a value for each of the {} layers, found {}", r.path, key, layers, v.dump());
  std::vector<bool> out;
  for (int64_t i = 0; i < layers; ++i) {
    const nlohmann::json& e = v[static_cast<size_t>(i)];
    if (e.is_boolean()) out.push_back(e.get<bool>());
    else if (e.is_number_integer() && (e.get<int64_t>() == 0 || e.get<int64_t>() == 1)) out.push_back(e.get<int64_t>() == 1);
    else fail("{}: {}[{}] must be 0 or 1, found {}", r.path, key, i, e.dump());
  }
  return out;
}

class Llama4 : public ArchDef {
 public:
  std::string_view hf_name() const override { return "Llama4ForCausalLM"; }

  // Llama4TextConfig's defaults, where the published configs rely on them.
  void fill_config_defaults(nlohmann::json& j) const override {
    const nlohmann::json defaults = {{"num_local_experts", 16},        {"num_experts_per_tok", 1},
                                     {"intermediate_size", 8192},      {"intermediate_size_mlp", 16384},
                                     {"head_dim", 128},                {"rms_norm_eps", 1e-5},
                                     {"interleave_moe_layer_step", 1}, {"no_rope_layer_interval", 4},
                                     {"bos_token_id", 1},              {"eos_token_id", 2}};
    for (const auto& [k, v] : defaults.items())
      if (!j.contains(k)) j[k] = v;
    if (!j.contains("attention_chunk_size")) j["attention_chunk_size"] = 8192;
    const bool theta_inside = j.contains("rope_parameters") && j["rope_parameters"].is_object() &&
                              j["rope_parameters"].contains("rope_theta");
    if (!j.contains("rope_theta") && !theta_inside) j["rope_theta"] = 500000.0;
  }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    const int64_t L = c.num_layers;
    if (r.opt<std::string>("hidden_act", "silu") != "silu")
      fail("{}: Llama 4 supports hidden_act 'silu', found '{}'", r.path, r.j["hidden_act"].dump());
    if (r.opt<bool>("attention_bias", false))
      fail("{}: attention_bias=true is not supported for Llama 4 (the published models have none)", r.path);
    const std::string rope = c.rope_scaling.type;
    if (!rope.empty() && rope != "llama3")
      fail("{}: Llama 4 supports rope type default or llama3, found '{}'", r.path, rope);
    Llama4Config& g = c.llama4;
    c.moe.num_experts = r.req<int64_t>("num_local_experts");
    r.positive("num_local_experts", c.moe.num_experts);
    c.moe.top_k = r.req<int64_t>("num_experts_per_tok");
    if (c.moe.top_k <= 0 || c.moe.top_k > c.moe.num_experts)
      fail("{}: num_experts_per_tok = {} must be in [1, num_local_experts = {}]", r.path, c.moe.top_k,
           c.moe.num_experts);
    c.moe.moe_intermediate_size = r.req<int64_t>("intermediate_size");
    r.positive("intermediate_size", c.moe.moe_intermediate_size);
    g.intermediate_size_mlp = r.req<int64_t>("intermediate_size_mlp");
    r.positive("intermediate_size_mlp", g.intermediate_size_mlp);
    c.intermediate_size = g.intermediate_size_mlp;

    // RoPE / NoPE per layer: no_rope_layers (1 = RoPE), or every no_rope_layer_interval-th layer NoPE.
    std::vector<bool> rotates;
    if (r.has("no_rope_layers") && !(r.j["no_rope_layers"].is_array() && r.j["no_rope_layers"].empty())) {
      rotates = layer_flags(r, "no_rope_layers", L);
    } else {
      const int64_t every = r.req<int64_t>("no_rope_layer_interval");
      r.positive("no_rope_layer_interval", every);
      for (int64_t i = 0; i < L; ++i) rotates.push_back((i + 1) % every != 0);
    }
    for (int64_t i = 0; i < L; ++i) c.attention[i].rope = rotates[static_cast<size_t>(i)];
    // MoE layers: moe_layers, or every interleave_moe_layer_step-th layer from step - 1.
    g.moe.assign(static_cast<size_t>(L), false);
    if (r.has("moe_layers")) {
      const nlohmann::json& v = r.j["moe_layers"];
      if (!v.is_array()) fail("{}: field 'moe_layers' must be a list of layer indices, found {}", r.path, v.dump());
      for (const nlohmann::json& e : v) {
        if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() >= L)
          fail("{}: moe_layers entry {} is not a layer index in [0, {})", r.path, e.dump(), L);
        g.moe[e.get<size_t>()] = true;
      }
    } else {
      const int64_t step = r.req<int64_t>("interleave_moe_layer_step");
      r.positive("interleave_moe_layer_step", step);
      for (int64_t i = step - 1; i < L; i += step) g.moe[static_cast<size_t>(i)] = true;
    }
    const int64_t chunk = r.opt<int64_t>("attention_chunk_size", 0);
    if (chunk < 0) fail("{}: attention_chunk_size must be positive or null, found {}", r.path, chunk);
    // layer_types (transformers 5 saves it): "chunked_attention" / "full_attention"; else the RoPE
    // layers are chunked when there is a chunk size.
    std::vector<AttentionKind> kinds;
    if (r.has("layer_types")) {
      kinds = read_layer_types(r, L, {{"chunked_attention", AttentionKind::chunked}, {"full_attention", AttentionKind::full}},
                               /*at_least=*/true);
      for (int64_t i = 0; i < L; ++i)
        if (kinds[static_cast<size_t>(i)] == AttentionKind::chunked && chunk == 0)
          fail("{}: layer_types[{}] is chunked_attention but attention_chunk_size is null", r.path, i);
    } else {
      for (int64_t i = 0; i < L; ++i)
        kinds.push_back(rotates[static_cast<size_t>(i)] && chunk > 0 ? AttentionKind::chunked : AttentionKind::full);
    }
    set_layer_kinds(c.attention, kinds, chunk);
    g.l2_qk_norm = r.opt<bool>("use_qk_norm", true);
    // Published configs write attn_temperature_tuning as a number (Scout: 4); transformers reads it as truthy.
    if (r.has("attn_temperature_tuning")) {
      const nlohmann::json& v = r.j["attn_temperature_tuning"];
      if (v.is_boolean()) g.temperature_tuning = v.get<bool>();
      else if (v.is_number()) g.temperature_tuning = v.get<double>() != 0;
      else fail("{}: field 'attn_temperature_tuning' must be a boolean, found {}", r.path, v.dump());
    }
    g.floor_scale = r.opt<double>("floor_scale", 8192.0);
    if (!(g.floor_scale > 0)) fail("{}: floor_scale must be positive, found {}", r.path, g.floor_scale);
    g.attn_scale = r.opt<double>("attn_scale", 0.1);
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    const std::string f = fmt::format("model.layers.{}.feed_forward", i);
    if (!c.llama4.moe[static_cast<size_t>(i)]) {
      plan_dense_mlp(c, i, f, c.llama4.intermediate_size_mlp, out);
      return;
    }
    plan_sparse_moe(c, i, f, {"gate_proj", "up_proj", "down_proj"}, out, "router");
    out.back().fused_input_major = true;
    plan_dense_mlp(c, i, f + ".shared_expert", c.moe.moe_intermediate_size, out);
  }

  std::unique_ptr<Mixer> make_mixer(const LayerBuild& b, int64_t i) const override {
    const Llama4Config& g = b.loader.config().llama4;
    const AttentionLayerSpec& a = b.loader.config().attention[i];
    const bool rope = a.rope;
    return std::make_unique<Llama4Attention>(
        b, i,
        Llama4AttentionLayout{.rope = rope,
                              .l2_qk_norm = rope && g.l2_qk_norm,
                              .chunk = a.chunk(),
                              .temperature = !rope && g.temperature_tuning,
                              .floor_scale = g.floor_scale,
                              .attn_scale = g.attn_scale});
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    const std::string f = fmt::format("model.layers.{}.feed_forward", i);
    if (!l.config().llama4.moe[static_cast<size_t>(i)]) return std::make_unique<DenseMlp>(l, f);
    return std::make_unique<Llama4Moe>(l, f);
  }

  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["num_local_experts"] = o.experts;
    c["num_experts_per_tok"] = 1;
    c["intermediate_size"] = o.moe_intermediate;
    c["intermediate_size_mlp"] = o.intermediate;
    c["interleave_moe_layer_step"] = 2;  // dense, MoE, dense, ...
    c["no_rope_layer_interval"] = 2;     // RoPE (chunked), NoPE, ...
    c["attention_chunk_size"] = 4;
    c["floor_scale"] = 4;
    c["attn_scale"] = 0.1;
    c["attn_temperature_tuning"] = true;
    c["use_qk_norm"] = true;
    c["rope_theta"] = 500000.0;
  }
};

class Llama4Wrapper final : public Llama4 {
 public:
  std::string_view hf_name() const override { return "Llama4ForConditionalGeneration"; }
  std::optional<Wrapper> wrapper() const override { return Wrapper{{"text_config"}, "language_model."}; }
};

}  // namespace

const ArchDef& llama4_arch() {
  static const Llama4 d;
  return d;
}

const ArchDef& llama4_vl_arch() {
  static const Llama4Wrapper d;
  return d;
}

}  // namespace fp4lm::model
