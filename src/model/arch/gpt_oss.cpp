// GptOssForCausalLM (OpenAI gpt-oss-20b / -120b), as transformers' modeling_gpt_oss computes it:
// the pre-norm block; attention with q/k/v/o biases, YaRN RoPE (rotate-half), a learned sink logit
// per head in the softmax denominator (`self_attn.sinks`), layers alternating between a sliding
// window and full attention (layer_types; default: even layers sliding); every layer a sparse
// MoE block `mlp` whose router `mlp.router` has a bias and whose weights are the softmax of the
// top-k logits (= softmax over all, renormalized over the top k), and whose experts are two fused
// parameters `mlp.experts.gate_up_proj` (gate and up interleaved) and `mlp.experts.down_proj`, each
// with a bias, run through the clamped SwiGLU (swiglu_alpha, swiglu_limit):
// (clamp(up, ±limit) + 1) · g · sigmoid(alpha · g), g = min(gate, limit). Stored as MXFP4
// (`*_blocks` / `*_scales`, quant_method "mxfp4") or unquantized input-major
// ([E, in, out]) as transformers writes the dequantized model.
#include <fmt/format.h>

#include "core/error.h"
#include "model/arch/arch.h"
#include "model/layers/attention.h"
#include "model/layers/sparse_moe.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

class GptOss final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "GptOssForCausalLM"; }

  void fill_config_defaults(nlohmann::json& j) const override {
    const nlohmann::json defaults = {{"num_hidden_layers", 36},     {"num_local_experts", 128},
                                     {"vocab_size", 201088},        {"hidden_size", 2880},
                                     {"intermediate_size", 2880},   {"head_dim", 64},
                                     {"num_attention_heads", 64},   {"num_key_value_heads", 8},
                                     {"sliding_window", 128},       {"max_position_embeddings", 131072},
                                     {"rms_norm_eps", 1e-5},        {"num_experts_per_tok", 4},
                                     {"attention_bias", true},      {"tie_word_embeddings", false}};
    for (const auto& [k, v] : defaults.items())
      if (!j.contains(k)) j[k] = v;
    const bool has_rope = (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) ||
                          (j.contains("rope_scaling") && !j["rope_scaling"].is_null());
    if (!has_rope)
      j["rope_parameters"] = {{"rope_type", "yarn"},    {"rope_theta", 150000.0},
                              {"factor", 32.0},         {"beta_fast", 32.0},
                              {"beta_slow", 1.0},       {"truncate", false},
                              {"original_max_position_embeddings", 4096}};
    if (!j.contains("rope_theta") && !(j.contains("rope_parameters") && j["rope_parameters"].contains("rope_theta")))
      j["rope_theta"] = 150000.0;
  }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    c.moe.num_experts = r.req<int64_t>("num_local_experts");
    r.positive("num_local_experts", c.moe.num_experts);
    c.moe.top_k = r.req<int64_t>("num_experts_per_tok");
    if (c.moe.top_k <= 0 || c.moe.top_k > c.moe.num_experts)
      fail("{}: num_experts_per_tok = {} must be in [1, num_local_experts = {}]", r.path, c.moe.top_k,
           c.moe.num_experts);
    c.moe.moe_intermediate_size = r.req<int64_t>("intermediate_size");
    r.positive("intermediate_size", c.moe.moe_intermediate_size);
    c.moe.norm_topk_prob = true;  // softmax over the top-k logits
    // GptOssRMSNorm keeps x/rms in float32 and rounds (weight · x/rms) once, as Gemma's norms.
    c.norm_rounds_once = true;
    c.hidden_act = r.opt<std::string>("hidden_act", "silu");
    GptOssConfig& g = c.gpt_oss;
    g.swiglu_alpha = r.opt<double>("swiglu_alpha", 1.702);
    g.swiglu_limit = r.opt<double>("swiglu_limit", 7.0);
    if (!(g.swiglu_limit > 0)) fail("{}: swiglu_limit must be positive, found {}", r.path, g.swiglu_limit);
    const int64_t window = r.has("sliding_window") ? r.get<int64_t>("sliding_window") : 0;
    if (window < 0) fail("{}: sliding_window must be positive or null, found {}", r.path, window);
    // layer_types, else transformers' default: the even layers sliding, the odd ones full.
    std::vector<AttentionKind> kinds;
    if (r.has("layer_types")) {
      kinds = read_layer_types(r, c.num_layers,
                               {{"sliding_attention", AttentionKind::sliding}, {"full_attention", AttentionKind::full}});
    } else {
      for (int64_t i = 0; i < c.num_layers; ++i)
        kinds.push_back((i + 1) % 2 != 0 ? AttentionKind::sliding : AttentionKind::full);
    }
    set_layer_kinds(c.attention, kinds, window);
    if (c.attention.any(AttentionKind::sliding) && window == 0)
      fail("{}: layer_types has sliding_attention layers but sliding_window is absent or null", r.path);
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out, /*o_proj_bias=*/c.attention_bias);
    // The experts are two fused parameters, gate and up interleaved (the expert_proj names).
    plan_sparse_moe(c, i, fmt::format("model.layers.{}.mlp", i), {"gate_up_proj", "gate_up_proj", "down_proj"}, out,
                    "router", /*router_bias=*/true);
    LayerSpec& moe = out.back();
    moe.expert_layout = LayerSpec::ExpertLayout::gpt_oss;
    moe.expert_activation = {kernels::ExpertActivation::Gate::clamped_swiglu, /*interleaved=*/true,
                             static_cast<float>(c.gpt_oss.swiglu_alpha), static_cast<float>(c.gpt_oss.swiglu_limit)};
  }

  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    std::vector<LayerParam> out = ArchDef::layer_params(c, i);
    out.push_back({fmt::format("model.layers.{}.self_attn.sinks", i), {c.num_heads}});
    return out;
  }

  std::unique_ptr<Mixer> make_mixer(const LayerBuild& b, int64_t i) const override {
    return std::make_unique<Attention>(
        b, i, AttentionLayout{.window = b.loader.config().attention[i].sliding_window(), .sinks = true});
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<SparseMoe>(l, fmt::format("model.layers.{}.mlp", i), /*renormalize=*/true,
                                       /*shared_expert=*/false, "router");
  }

  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    c["num_local_experts"] = o.experts;
    c["num_experts_per_tok"] = o.top_k;
    c["intermediate_size"] = o.moe_intermediate;
    c["attention_bias"] = true;
    c["sliding_window"] = 4;
    nlohmann::json types = nlohmann::json::array();
    for (int64_t i = 0; i < o.layers; ++i) types.push_back(i % 2 == 0 ? "sliding_attention" : "full_attention");
    c["layer_types"] = types;
    c["swiglu_limit"] = 7.0;
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 32.0}, {"beta_fast", 32.0}, {"beta_slow", 1.0},
                         {"truncate", false}, {"original_max_position_embeddings", 64}};
    c["rope_theta"] = 150000.0;
  }
};

}  // namespace

const ArchDef& gpt_oss_arch() {
  static const GptOss d;
  return d;
}

}  // namespace fp4lm::model
