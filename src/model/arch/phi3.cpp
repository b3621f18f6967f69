// Phi3ForCausalLM (Phi-3 / Phi-3.5-mini, Phi-4, Phi-4-mini): Llama's pre-norm block with the
// projections stored fused, as HF's Phi3 modules hold them: self_attn.qkv_proj (q rows, then k,
// then v) and mlp.gate_up_proj (gate rows, then up). Its config (transformers' Phi3Config):
//  - head_dim = hidden_size / num_attention_heads; RoPE over its first
//    int(head_dim · partial_rotary_factor) dims (Phi-4-mini: 0.75), the rest passed through;
//  - rope_scaling null or LongRoPE ({"type": "longrope"}, and the legacy "su" / "yarn" that
//    Phi3Config reads as longrope) with short_factor / long_factor and the top-level
//    original_max_position_embeddings (default 4096), which wins over one inside rope_scaling;
//  - sliding_window (Phi-3-mini-4k: 2047): position p attends to (p - window, p], as Mistral;
//    null or a window no sequence reaches (>= max_position_embeddings) means full attention;
//  - rms_norm_eps defaults to 1e-5, eos_token_id to 32000.
// LongRoPE switches frequencies by sequence length as transformers does (model/layers/rope.h): a forward
// step whose sequence is longer than original_max_position_embeddings rotates all its rows with the
// long factors; a KV cache that crosses the boundary keeps the keys of earlier steps as they were
// rotated (short), exactly as transformers' generate with a cache. vLLM differs there (it re-picks
// per batch and likewise never re-rotates the cache); a prompt prefilled in one step is the same in all three.
// Keys transformers' Phi3 ignores but which would change the model are errors when not the
// published values: attention_bias, mlp_bias, lm_head_bias true; Phi-4-mini's full_attn_mod and
// interpolate_factor other than 1.
#include <cmath>

#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/layers/mlp.h"

namespace fp4lm::model {

namespace {

// The RoPE object Phi3Config reads: rope_parameters (transformers 5's own form) or rope_scaling.
nlohmann::json* rope_object(nlohmann::json& j) {
  for (const char* k : {"rope_parameters", "rope_scaling"})
    if (j.contains(k) && j[k].is_object()) return &j[k];
  return nullptr;
}

class Phi3 final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "Phi3ForCausalLM"; }

  void fill_config_defaults(nlohmann::json& j) const override {
    if (!j.contains("rms_norm_eps")) j["rms_norm_eps"] = 1e-5;
    if (!j.contains("eos_token_id")) j["eos_token_id"] = 32000;
    if (!j.contains("original_max_position_embeddings")) j["original_max_position_embeddings"] = 4096;
    nlohmann::json* rope = rope_object(j);
    if (rope == nullptr) return;
    std::string type = rope->value("rope_type", rope->value("type", std::string("default")));
    if (type == "su" || type == "yarn") type = "longrope";  // Phi3Config's backward compatibility
    (*rope)["rope_type"] = type;
    if (type == "longrope") (*rope)["original_max_position_embeddings"] = j["original_max_position_embeddings"];
  }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_dense_mlp_keys(r, c);
    for (const char* k : {"attention_bias", "mlp_bias", "lm_head_bias"})
      if (r.opt<bool>(k, false))
        fail("{}: {}=true is not supported: Phi3ForCausalLM's projections have no bias", r.path, k);
    for (const char* k : {"full_attn_mod", "interpolate_factor"})
      if (r.has(k) && r.get<int64_t>(k) != 1)
        fail("{}: field '{}' must be 1 (the published Phi-4-mini value), found {}", r.path, k, r.j[k].dump());
    const std::string type = c.rope_scaling.type;
    if (!type.empty() && type != "longrope")
      fail("{}: Phi3ForCausalLM supports rope type default or longrope (su, yarn), found '{}'", r.path, type);

    // partial_rotary_factor: inside the RoPE object (transformers 5) or at the top level (Phi-4-mini).
    double prf = r.opt<double>("partial_rotary_factor", 1.0);
    for (const char* k : {"rope_parameters", "rope_scaling"})
      if (r.has(k) && r.j[k].is_object() && r.j[k].contains("partial_rotary_factor")) {
        prf = ConfigReader{r.j[k], r.path}.get<double>("partial_rotary_factor");
        break;
      }
    if (!(prf > 0 && prf <= 1)) fail("{}: partial_rotary_factor must be in (0, 1], found {}", r.path, prf);
    c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * prf);
    if (c.rotary_dim <= 0 || c.rotary_dim % 2 != 0)
      fail("{}: RoPE over int(head_dim {} x partial_rotary_factor {}) = {} dims: must be positive and even", r.path,
           c.head_dim, prf, c.rotary_dim);

    if (r.has("sliding_window")) {
      const int64_t window = r.get<int64_t>("sliding_window");
      r.positive("sliding_window", window);
      if (window < c.max_position_embeddings) c.attention.set_kind(AttentionKind::full, AttentionKind::sliding, window);
    }
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
    const std::string a = fmt::format("model.layers.{}.self_attn", i), m = fmt::format("model.layers.{}.mlp", i);
    out.push_back(plan_linear(a + ".qkv_proj", i, {a + ".qkv_proj"}, {q + 2 * kv}, c.hidden_size));
    out.push_back(plan_linear(a + ".o_proj", i, {a + ".o_proj"}, {c.hidden_size}, q));
    out.push_back(plan_linear(m + ".gate_up_proj", i, {m + ".gate_up_proj"}, {2 * c.intermediate_size}, c.hidden_size));
    out.push_back(plan_linear(m + ".down_proj", i, {m + ".down_proj"}, {c.hidden_size}, c.intermediate_size));
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<DenseMlp>(l, fmt::format("model.layers.{}.mlp", i));
  }

  void synthetic_config(const SampleShape&, nlohmann::json& c) const override {
    c["sliding_window"] = nullptr;
    c["original_max_position_embeddings"] = c.value("max_position_embeddings", 4096);
  }
};

}  // namespace

const ArchDef& phi3_arch() {
  static const Phi3 d;
  return d;
}

}  // namespace fp4lm::model
