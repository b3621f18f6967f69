#include "model/model_config.h"

#include <algorithm>

#include "core/error.h"

namespace fp4lm::model {

using nlohmann::json;

namespace {

struct Reader {
  const json& j;
  const std::string& path;

  template <typename T>
  T req(const char* key) const {
    if (!j.contains(key) || j[key].is_null()) fail("{}: missing required field '{}'", path, key);
    return get<T>(key);
  }
  template <typename T>
  T opt(const char* key, T def) const {
    if (!j.contains(key) || j[key].is_null()) return def;
    return get<T>(key);
  }
  template <typename T>
  T get(const char* key) const {
    const json& v = j[key];
    if constexpr (std::is_same_v<T, bool>) {
      if (!v.is_boolean()) fail("{}: field '{}' must be a boolean, found {}", path, key, v.dump());
    } else if constexpr (std::is_integral_v<T>) {
      if (!v.is_number_integer()) fail("{}: field '{}' must be an integer, found {}", path, key, v.dump());
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!v.is_number()) fail("{}: field '{}' must be a number, found {}", path, key, v.dump());
    } else {
      if (!v.is_string()) fail("{}: field '{}' must be a string, found {}", path, key, v.dump());
    }
    return v.get<T>();
  }
  void positive(const char* key, int64_t v) const {
    if (v <= 0) fail("{}: field '{}' must be positive, found {}", path, key, v);
  }
};

}  // namespace

bool ModelConfig::layer_is_moe(int64_t i) const {
  if (!is_moe()) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), i) != mlp_only_layers.end()) return false;
  return (i + 1) % decoder_sparse_step == 0;
}

int64_t ModelConfig::num_attention_layers() const {
  int64_t n = 0;
  for (int64_t i = 0; i < num_layers; ++i) n += layer_is_attention(i);
  return n;
}

namespace {
// Qwen3.5-MoE hybrid keys: layer types, the gated delta-net's dimensions, partial RoPE.
void parse_hybrid(const json& j, const Reader& r, ModelConfig& c) {
  const std::string& path = r.path;
  c.zero_centered_norm = true;
  c.qk_norm = true;
  c.attn_output_gate = r.opt<bool>("attn_output_gate", true);
  c.linear_num_key_heads = r.req<int64_t>("linear_num_key_heads");
  c.linear_num_value_heads = r.req<int64_t>("linear_num_value_heads");
  c.linear_key_head_dim = r.req<int64_t>("linear_key_head_dim");
  c.linear_value_head_dim = r.req<int64_t>("linear_value_head_dim");
  c.linear_conv_kernel = r.opt<int64_t>("linear_conv_kernel_dim", 4);
  for (auto [k, v] : {std::pair{"linear_num_key_heads", c.linear_num_key_heads},
                      {"linear_num_value_heads", c.linear_num_value_heads},
                      {"linear_key_head_dim", c.linear_key_head_dim},
                      {"linear_value_head_dim", c.linear_value_head_dim},
                      {"linear_conv_kernel_dim", c.linear_conv_kernel}})
    r.positive(k, v);
  if (c.linear_num_value_heads % c.linear_num_key_heads != 0)
    fail("{}: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})", path,
         c.linear_num_value_heads, c.linear_num_key_heads);
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const json& t = j["layer_types"];
    if (!t.is_array() || static_cast<int64_t>(t.size()) != c.num_layers)
      fail("{}: field 'layer_types' must list {} layer types (num_hidden_layers), found {}", path, c.num_layers,
           t.dump());
    for (const json& v : t) {
      const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s != "full_attention" && s != "linear_attention")
        fail("{}: field 'layer_types' holds '{}' (expected full_attention or linear_attention)", path, s);
      c.full_attention.push_back(s == "full_attention");
    }
  } else {
    const int64_t every = r.opt<int64_t>("full_attention_interval", 4);
    r.positive("full_attention_interval", every);
    for (int64_t i = 0; i < c.num_layers; ++i) c.full_attention.push_back((i + 1) % every == 0);
  }
  if (c.num_attention_layers() == 0)
    fail("{}: no full_attention layer (layer_types / full_attention_interval); fp4lm needs at least one", path);
  // rope_parameters (Qwen3.5) or top-level keys (Qwen3-Next). For text, mrope's three position
  // ids are all the token index, so mrope_section is plain RoPE.
  double factor = r.opt<double>("partial_rotary_factor", 1.0);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    Reader rp{j["rope_parameters"], path};
    c.rope_theta = rp.opt<double>("rope_theta", c.rope_theta);
    factor = rp.opt<double>("partial_rotary_factor", factor);
    const std::string type = rp.opt<std::string>("rope_type", "default");
    if (type != "default") fail("{}: unsupported rope_parameters.rope_type '{}' (supported: default)", path, type);
  }
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
  if (c.rotary_dim <= 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    fail("{}: partial_rotary_factor {} gives rotary dims {} (must be even, in (0, head_dim {}])", path, factor,
         c.rotary_dim, c.head_dim);
  c.num_experts = r.req<int64_t>("num_experts");
  c.top_k = r.req<int64_t>("num_experts_per_tok");
  c.moe_intermediate_size = r.req<int64_t>("moe_intermediate_size");
  c.norm_topk_prob = true;  // qwen3_5_moe always renormalizes the top-k weights
  c.shared_expert_intermediate_size = r.req<int64_t>("shared_expert_intermediate_size");
  r.positive("shared_expert_intermediate_size", c.shared_expert_intermediate_size);
  const std::string ssm = r.opt<std::string>("mamba_ssm_dtype", "float32");
  if (ssm != "float32") fail("{}: unsupported mamba_ssm_dtype '{}' (supported: float32)", path, ssm);
}
}  // namespace

ModelConfig parse_model_config(const json& top, const std::string& path) {
  if (!top.is_object()) fail("{}: expected a JSON object, found {}", path, top.type_name());
  ModelConfig c;
  if (!top.contains("architectures") || !top["architectures"].is_array() || top["architectures"].empty() ||
      !top["architectures"][0].is_string())
    fail("{}: field 'architectures' must be a non-empty list of names", path);
  c.architecture = top["architectures"][0].get<std::string>();
  static const std::pair<const char*, Arch> kArchs[] = {
      {"LlamaForCausalLM", Arch::Llama},       {"Qwen2ForCausalLM", Arch::Qwen2},
      {"Qwen3ForCausalLM", Arch::Qwen3},       {"Qwen3MoeForCausalLM", Arch::Qwen3Moe},
      {"MixtralForCausalLM", Arch::Mixtral},   {"Qwen2MoeForCausalLM", Arch::Qwen2Moe},
      {"Qwen3_5MoeForCausalLM", Arch::Qwen3_5Moe}, {"Qwen3_5MoeForConditionalGeneration", Arch::Qwen3_5Moe},
  };
  bool known = false;
  for (auto& [name, a] : kArchs)
    if (c.architecture == name) c.arch = a, known = true;
  if (!known)
    fail("{}: unsupported architecture '{}' (supported: LlamaForCausalLM, Qwen2ForCausalLM, "
         "Qwen3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM, "
         "Qwen3_5MoeForCausalLM, Qwen3_5MoeForConditionalGeneration)",
         path, c.architecture);
  // The VL form keeps the text model's keys under text_config (vision_config is ignored) and its
  // tensors under model.language_model.
  json text;
  const bool vl = c.architecture == "Qwen3_5MoeForConditionalGeneration";
  if (vl) {
    if (!top.contains("text_config") || !top["text_config"].is_object())
      fail("{}: {} needs an object 'text_config'", path, c.architecture);
    text = top["text_config"];
    for (const char* k : {"torch_dtype", "dtype", "eos_token_id", "bos_token_id", "tie_word_embeddings"})
      if (!text.contains(k) && top.contains(k)) text[k] = top[k];
    c.tensor_prefix = "model.language_model.";
  }
  const json& j = vl ? text : top;
  Reader r{j, path};

  c.vocab_size = r.req<int64_t>("vocab_size");
  c.hidden_size = r.req<int64_t>("hidden_size");
  c.num_layers = r.req<int64_t>("num_hidden_layers");
  c.num_heads = r.req<int64_t>("num_attention_heads");
  c.num_kv_heads = r.opt<int64_t>("num_key_value_heads", c.num_heads);
  for (auto [k, v] : {std::pair{"vocab_size", c.vocab_size}, {"hidden_size", c.hidden_size},
                      {"num_hidden_layers", c.num_layers}, {"num_attention_heads", c.num_heads},
                      {"num_key_value_heads", c.num_kv_heads}})
    r.positive(k, v);
  if (c.num_heads % c.num_kv_heads != 0)
    fail("{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", path, c.num_heads,
         c.num_kv_heads);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = r.get<int64_t>("head_dim");
  } else {
    if (c.hidden_size % c.num_heads != 0)
      fail("{}: hidden_size ({}) is not a multiple of num_attention_heads ({}) and no head_dim is given",
           path, c.hidden_size, c.num_heads);
    c.head_dim = c.hidden_size / c.num_heads;
  }
  r.positive("head_dim", c.head_dim);
  if (c.head_dim % 2 != 0) fail("{}: head_dim must be even for RoPE, found {}", path, c.head_dim);
  c.rms_norm_eps = r.opt<double>("rms_norm_eps", 1e-6);
  c.rope_theta = r.opt<double>("rope_theta", 10000.0);
  c.max_position_embeddings = r.opt<int64_t>("max_position_embeddings", 2048);
  c.tie_word_embeddings = r.opt<bool>("tie_word_embeddings", false);
  c.torch_dtype = r.opt<std::string>("torch_dtype", r.opt<std::string>("dtype", ""));
  std::string act = r.opt<std::string>("hidden_act", "silu");
  if (act != "silu") fail("{}: unsupported hidden_act '{}' (supported: silu)", path, act);

  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const json& rs = j["rope_scaling"];
    if (!rs.is_object()) fail("{}: field 'rope_scaling' must be an object or null", path);
    std::string type = rs.value("rope_type", rs.value("type", std::string()));
    Reader rr{rs, path};
    if (type == "linear") {
      c.rope_scaling.type = type;
      c.rope_scaling.factor = rr.req<double>("factor");
    } else if (type == "llama3") {
      c.rope_scaling.type = type;
      c.rope_scaling.factor = rr.req<double>("factor");
      c.rope_scaling.low_freq_factor = rr.req<double>("low_freq_factor");
      c.rope_scaling.high_freq_factor = rr.req<double>("high_freq_factor");
      c.rope_scaling.original_max_position_embeddings = rr.req<int64_t>("original_max_position_embeddings");
    } else if (type != "default" && !type.empty()) {
      fail("{}: unsupported rope_scaling type '{}' (supported: linear, llama3)", path, type);
    }
  }
  if (j.contains("sliding_window") && !j["sliding_window"].is_null() && r.opt<bool>("use_sliding_window", false))
    fail("{}: use_sliding_window=true is not supported", path);

  c.attention_bias = r.opt<bool>("attention_bias", false);
  if (c.arch == Arch::Qwen2 || c.arch == Arch::Qwen2Moe) c.attention_bias = true;
  c.qk_norm = c.arch == Arch::Qwen3 || c.arch == Arch::Qwen3Moe;
  c.rotary_dim = c.head_dim;

  switch (c.arch) {
    case Arch::Llama:
    case Arch::Qwen2:
    case Arch::Qwen3:
      c.intermediate_size = r.req<int64_t>("intermediate_size");
      r.positive("intermediate_size", c.intermediate_size);
      break;
    case Arch::Qwen3Moe:
    case Arch::Qwen2Moe:
      c.num_experts = r.req<int64_t>("num_experts");
      c.top_k = r.req<int64_t>("num_experts_per_tok");
      c.moe_intermediate_size = r.req<int64_t>("moe_intermediate_size");
      c.norm_topk_prob = r.opt<bool>("norm_topk_prob", c.arch == Arch::Qwen3Moe);
      c.decoder_sparse_step = r.opt<int64_t>("decoder_sparse_step", 1);
      c.intermediate_size = r.opt<int64_t>("intermediate_size", 0);
      if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
        if (!j["mlp_only_layers"].is_array()) fail("{}: field 'mlp_only_layers' must be a list", path);
        for (const json& v : j["mlp_only_layers"]) {
          if (!v.is_number_integer()) fail("{}: field 'mlp_only_layers' must hold integers", path);
          c.mlp_only_layers.push_back(v.get<int64_t>());
        }
      }
      if (c.arch == Arch::Qwen2Moe) {
        c.shared_expert_intermediate_size = r.req<int64_t>("shared_expert_intermediate_size");
        r.positive("shared_expert_intermediate_size", c.shared_expert_intermediate_size);
      }
      break;
    case Arch::Qwen3_5Moe:
      parse_hybrid(j, r, c);
      break;
    case Arch::Mixtral:
      c.num_experts = r.req<int64_t>("num_local_experts");
      c.top_k = r.req<int64_t>("num_experts_per_tok");
      c.moe_intermediate_size = r.req<int64_t>("intermediate_size");
      c.intermediate_size = c.moe_intermediate_size;
      c.norm_topk_prob = true;  // Mixtral always renormalizes its top-k softmax weights
      break;
  }
  if (c.is_moe()) {
    r.positive("num_experts", c.num_experts);
    r.positive("num_experts_per_tok", c.top_k);
    r.positive("moe_intermediate_size", c.moe_intermediate_size);
    r.positive("decoder_sparse_step", c.decoder_sparse_step);
    if (c.top_k > c.num_experts)
      fail("{}: num_experts_per_tok ({}) exceeds the number of experts ({})", path, c.top_k, c.num_experts);
    bool any_dense = c.decoder_sparse_step != 1 || !c.mlp_only_layers.empty();
    if (any_dense && c.intermediate_size <= 0)
      fail("{}: dense MLP layers need a positive 'intermediate_size'", path);
  }

  auto ids = [&](const char* key) {
    std::vector<int64_t> out;
    if (!j.contains(key) || j[key].is_null()) return out;
    if (j[key].is_number_integer()) out.push_back(j[key].get<int64_t>());
    else if (j[key].is_array())
      for (const json& v : j[key])
        if (v.is_number_integer()) out.push_back(v.get<int64_t>());
    return out;
  };
  c.eos_token_ids = ids("eos_token_id");
  if (auto b = ids("bos_token_id"); !b.empty()) c.bos_token_id = b[0];
  return c;
}

}  // namespace fp4lm::model
