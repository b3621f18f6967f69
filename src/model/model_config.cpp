#include "model/model_config.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/error.h"
#include "core/log.h"
#include "model/arch/arch.h"
#include "model/config_reader.h"
#include "model/diffusion_gemma.h"
#include "model/model_limits.h"

namespace fp4lm::model {

using nlohmann::json;

bool ModelConfig::layer_is_moe(int64_t i) const {
  if (!is_moe()) return false;
  if (!llama4.moe.empty()) return llama4.moe[static_cast<size_t>(i)];
  if (std::find(moe.mlp_only_layers.begin(), moe.mlp_only_layers.end(), i) != moe.mlp_only_layers.end()) return false;
  return (i + 1) % moe.decoder_sparse_step == 0;
}

int64_t ModelConfig::num_attention_layers() const {
  int64_t n = 0;
  for (int64_t i = 0; i < num_layers; ++i) n += layer_is_attention(i);
  return n;
}

namespace {

// LongRoPE's keys, as HF _compute_longrope_parameters reads them: short_factor and long_factor
// (lists of numbers, checked against the rotary dims once those are known), the pretraining
// context original_max_position_embeddings (default max_position_embeddings; Phi-3 keeps it at
// the top level, which its ArchDef moves in), factor (default max / original) and
// attention_factor (default sqrt(1 + ln(factor) / ln(original)), 1 when factor <= 1).
void read_longrope(const ConfigReader& rr, const ConfigReader& r, const char* key, RopeScaling& s) {
  s.type = "longrope";
  for (auto [name, out] : {std::pair{"short_factor", &s.short_factor}, {"long_factor", &s.long_factor}}) {
    if (!rr.has(name) || !rr.j[name].is_array() || rr.j[name].empty())
      fail("{}: field '{}.{}' must be a non-empty list of numbers (LongRoPE)", r.path, key, name);
    for (const json& v : rr.j[name]) {
      if (!v.is_number() || !(v.get<double>() > 0))
        fail("{}: field '{}.{}' must hold positive numbers, found {}", r.path, key, name, v.dump());
      out->push_back(v.get<double>());
    }
  }
  const int64_t max_pos = r.opt<int64_t>("max_position_embeddings", 2048);
  s.original_max_position_embeddings = rr.opt<int64_t>("original_max_position_embeddings", max_pos);
  r.positive("original_max_position_embeddings", s.original_max_position_embeddings);
  const double orig = static_cast<double>(s.original_max_position_embeddings);
  s.factor = rr.opt<double>("factor", static_cast<double>(max_pos) / orig);
  s.attention_factor = rr.opt<double>(
      "attention_factor", s.factor <= 1.0 ? 1.0 : std::sqrt(1.0 + std::log(s.factor) / std::log(orig)));
  if (!(s.attention_factor > 0))
    fail("{}: field '{}.attention_factor' must be positive, found {}", r.path, key, s.attention_factor);
}

}  // namespace

ModelConfig parse_model_config(const json& top, const std::string& path) {
  if (!top.is_object()) fail("{}: expected a JSON object, found {}", path, top.type_name());
  ModelConfig c;
  if (!top.contains("architectures") || !top["architectures"].is_array() || top["architectures"].empty() ||
      !top["architectures"][0].is_string())
    fail("{}: field 'architectures' must be a non-empty list of names", path);
  c.architecture = top["architectures"][0].get<std::string>();
  c.arch = find_arch(c.architecture);
  if (!c.arch && c.architecture == kDiffusionGemmaArch)
    fail("{}: DiffusionGemmaForBlockDiffusion (block diffusion, not a causal LM) is supported only through "
         "`fp4lm generate`, `fp4lm serve` and fp4lm.LLM (not `eval`, `bench` or `quantize`)",
         path);
  if (!c.arch) {
    std::string names;
    for (const ArchDef* a : architectures()) names += (names.empty() ? "" : ", ") + std::string(a->hf_name());
    fail("{}: unsupported architecture '{}' (supported: {})", path, c.architecture, names);
  }
  // A VL checkpoint (…ForConditionalGeneration) keeps the text model's keys under text_config
  // (vision_config is ignored) and its tensors under model.language_model.
  // An architecture's own wrapper() form wins (Llama 4's …ForConditionalGeneration: language_model.*).
  json text;
  const auto own_wrapper = c.arch->wrapper();
  const bool vl = !own_wrapper && c.architecture.size() > 24 &&
                  c.architecture.compare(c.architecture.size() - 24, 24, "ForConditionalGeneration") == 0;
  if (vl) {
    if (c.arch->flat_text_config() && !top.contains("text_config")) {
      text = top;  // the text keys beside vision_config (which the text model never reads)
      text.erase("vision_config");
    } else if (!top.contains("text_config") || !top["text_config"].is_object()) {
      fail("{}: {} needs an object 'text_config'", path, c.architecture);
    } else {
      text = top["text_config"];
    }
    for (const char* k : {"torch_dtype", "dtype", "eos_token_id", "bos_token_id", "tie_word_embeddings"})
      if (!text.contains(k) && top.contains(k)) text[k] = top[k];
    // The wrapper's lm_head sits beside model.language_model, so transformers ties it by the
    // top-level config's tie_word_embeddings: that value wins where the two disagree.
    if (top.contains("tie_word_embeddings") && text["tie_word_embeddings"] != top["tie_word_embeddings"]) {
      log().warn("{}: tie_word_embeddings is {} at the top level and {} in text_config; the top level's value is "
                 "used (transformers ties the wrapper's lm_head by it)",
                 path, top["tie_word_embeddings"].dump(), text["tie_word_embeddings"].dump());
      text["tie_word_embeddings"] = top["tie_word_embeddings"];
    }
    c.tensor_prefix = "model.language_model.";
  } else if (const auto& w = own_wrapper) {
    // A wrapper of its own layout (Nemotron-H's VL / Omni: llm_config, language_model.*).
    for (const std::string& k : w->config_keys)
      if (top.contains(k) && top[k].is_object()) {
        text = top[k];
        break;
      }
    if (text.is_null()) {
      std::string keys;
      for (const std::string& k : w->config_keys) keys += (keys.empty() ? "'" : " or '") + k + "'";
      fail("{}: {} needs an object {} (the language model's config)", path, c.architecture, keys);
    }
    for (const char* k : {"torch_dtype", "dtype", "eos_token_id", "bos_token_id", "tie_word_embeddings"})
      if (!text.contains(k) && top.contains(k)) text[k] = top[k];
    if (w->top_level_tie) {
      const json tie = top.contains("tie_word_embeddings") ? top["tie_word_embeddings"] : json(*w->top_level_tie);
      if (text.contains("tie_word_embeddings") && text["tie_word_embeddings"] != tie)
        log().warn("{}: tie_word_embeddings is {} at the top level{} and {} in the language model's config; the top "
                   "level's value is used (transformers ties {}'s lm_head by it)",
                   path, tie.dump(), top.contains("tie_word_embeddings") ? "" : " (its default)",
                   text["tie_word_embeddings"].dump(), c.architecture);
      text["tie_word_embeddings"] = tie;
    }
    c.wrapper_prefix = w->tensor_prefix;
  }
  if (text.is_null()) text = top;
  // Keys the architecture's transformers config class defaults (Gemma 3's published configs
  // omit vocab_size, head_dim, ...): filled in before anything is read.
  c.arch->fill_config_defaults(text);
  const json& j = text;
  ConfigReader r{j, path};

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
  if (j.contains("kv_lora_rank") && !j["kv_lora_rank"].is_null()) {
    // Multi-head latent attention: heads are qk_nope + qk_rope wide, RoPE covers qk_rope_head_dim
    // (HF sets head_dim to it); the MLA ArchDef reads the rest.
    c.head_dim = r.req<int64_t>("qk_rope_head_dim");
    if (c.head_dim % 2 != 0) fail("{}: qk_rope_head_dim must be even, found {}", path, c.head_dim);
  } else if (j.contains("head_dim") && !j["head_dim"].is_null()) {
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
  c.hidden_act = r.opt<std::string>("hidden_act", "silu");

  // transformers 5 writes RoPE as one `rope_parameters` object (rope_type, rope_theta and the
  // scaling keys) instead of top-level rope_theta + rope_scaling; it wins when present.
  const char* rope_key = "rope_scaling";
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    rope_key = "rope_parameters";
    if (!j[rope_key].is_object()) fail("{}: field 'rope_parameters' must be an object or null", path);
    c.rope_theta = ConfigReader{j[rope_key], path}.opt<double>("rope_theta", c.rope_theta);
  }
  if (j.contains(rope_key) && !j[rope_key].is_null()) {
    const json& rs = j[rope_key];
    if (!rs.is_object()) fail("{}: field '{}' must be an object or null", path, rope_key);
    std::string type = rs.value("rope_type", rs.value("type", std::string()));
    ConfigReader rr{rs, path};
    if (type == "linear") {
      c.rope_scaling.type = type;
      c.rope_scaling.factor = rr.req<double>("factor");
    } else if (type == "llama3") {
      c.rope_scaling.type = type;
      c.rope_scaling.factor = rr.req<double>("factor");
      c.rope_scaling.low_freq_factor = rr.req<double>("low_freq_factor");
      c.rope_scaling.high_freq_factor = rr.req<double>("high_freq_factor");
      c.rope_scaling.original_max_position_embeddings = rr.req<int64_t>("original_max_position_embeddings");
    } else if (type == "yarn") {
      c.rope_scaling.type = type;
      c.rope_scaling.original_max_position_embeddings =
          rr.opt<int64_t>("original_max_position_embeddings", r.opt<int64_t>("max_position_embeddings", 2048));
      r.positive("original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings);
      // HF: without a factor, the ratio of the context lengths.
      c.rope_scaling.factor = rr.opt<double>(
          "factor", static_cast<double>(r.opt<int64_t>("max_position_embeddings", 2048)) /
                        static_cast<double>(c.rope_scaling.original_max_position_embeddings));
      c.rope_scaling.beta_fast = rr.opt<double>("beta_fast", 32.0);
      c.rope_scaling.beta_slow = rr.opt<double>("beta_slow", 1.0);
      c.rope_scaling.mscale = rr.opt<double>("mscale", 0.0);
      c.rope_scaling.mscale_all_dim = rr.opt<double>("mscale_all_dim", 0.0);
      c.rope_scaling.attention_factor = rr.opt<double>("attention_factor", -1.0);
      c.rope_scaling.truncate = rr.opt<bool>("truncate", true);
    } else if (type == "longrope") {
      read_longrope(rr, r, rope_key, c.rope_scaling);
    } else if (type != "default" && !type.empty()) {
      fail("{}: unsupported {} type '{}' (supported: default, linear, llama3, yarn, longrope)", path, rope_key, type);
    }
  }
  if (j.contains("sliding_window") && !j["sliding_window"].is_null() && r.opt<bool>("use_sliding_window", false))
    fail("{}: use_sliding_window=true is not supported", path);

  c.attention_bias = r.opt<bool>("attention_bias", false);
  // The attention table has a row per layer: an absurd layer count is refused before it is made
  // (check_model_limits, run in full below).
  if (c.num_layers > ModelLimits::num_hidden_layers) check_model_limits(c, path);
  c.attention = AttentionTable(c.num_layers);
  c.arch->parse_config(r, c);
  // The hybrids' layers without attention (gated delta-net, Mamba-2, MLP-only or MoE-only layers).
  for (int64_t i = 0; i < c.num_layers; ++i)
    if (!c.layer_is_attention(i) || (!c.mamba.pattern.empty() && !c.mamba.layer_is(i, '*')))
      c.attention[i] = AttentionLayerSpec{.kind = AttentionKind::none};
  complete_attention_table(c.attention, c.head_dim, c.num_kv_heads, c.rope_theta);
  if (c.hidden_act != "silu" && c.hidden_act != "gelu_pytorch_tanh")
    fail("{}: unsupported hidden_act '{}' (supported: silu, gelu_pytorch_tanh)", path, c.hidden_act);
  if (c.rotary_dim == 0) c.rotary_dim = c.head_dim;
  if (c.rope_scaling.type == "longrope")
    for (auto [name, f] : {std::pair{"short_factor", &c.rope_scaling.short_factor},
                           {"long_factor", &c.rope_scaling.long_factor}})
      if (static_cast<int64_t>(f->size()) != c.rotary_dim / 2)
        fail("{}: {}.{} has {} values, expected {} (half the {} rotary dims)", path, rope_key, name, f->size(),
             c.rotary_dim / 2, c.rotary_dim);
  if (c.is_moe()) {
    r.positive("num_experts", c.moe.num_experts);
    r.positive("num_experts_per_tok", c.moe.top_k);
    r.positive("moe_intermediate_size", c.moe.moe_intermediate_size);
    r.positive("decoder_sparse_step", c.moe.decoder_sparse_step);
    if (c.moe.top_k > c.moe.num_experts)
      fail("{}: num_experts_per_tok ({}) exceeds the number of experts ({})", path, c.moe.top_k, c.moe.num_experts);
    bool any_dense = c.moe.decoder_sparse_step != 1 || !c.moe.mlp_only_layers.empty();
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
  check_model_limits(c, path);
  return c;
}

void read_dense_mlp_keys(const ConfigReader& r, ModelConfig& c) {
  c.intermediate_size = r.req<int64_t>("intermediate_size");
  r.positive("intermediate_size", c.intermediate_size);
}

void read_sparse_moe_keys(const ConfigReader& r, ModelConfig& c, bool norm_topk_default) {
  // transformers 5 saves Qwen3-MoE's expert count as num_local_experts (num_experts is its alias).
  c.moe.num_experts = r.has("num_experts") || !r.has("num_local_experts") ? r.req<int64_t>("num_experts")
                                                                       : r.req<int64_t>("num_local_experts");
  c.moe.top_k = r.req<int64_t>("num_experts_per_tok");
  c.moe.moe_intermediate_size = r.req<int64_t>("moe_intermediate_size");
  c.moe.norm_topk_prob = r.opt<bool>("norm_topk_prob", norm_topk_default);
  c.moe.decoder_sparse_step = r.opt<int64_t>("decoder_sparse_step", 1);
  c.intermediate_size = r.opt<int64_t>("intermediate_size", 0);
  c.moe.mlp_only_layers = r.int_list("mlp_only_layers");
}

}  // namespace fp4lm::model
