// DiffusionGemma's encoder and decoder forwards, as transformers 5.24's
// models/diffusion_gemma/modeling_diffusion_gemma.py computes them (float32 activations, sums in
// double). The weights are Gemma 4's engine layers (model::Linear / FusedMoe over the mapped
// checkpoint, in whatever format the quant methods read); the embedding's rows are converted one at
// a time.
#include "model/diffusion_gemma.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <set>
#include <string_view>

#include "core/dtype.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "kernels/a16_scope.h"
#include "model/arch/gemma_moe.h"
#include "model/config_reader.h"
#include "model/layer_plan.h"
#include "model/layers/linear.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

using nlohmann::json;

// Keys read nowhere because they do not change inference, each with why.
// (Top level: the vision tower is never run, so its config and the image token ids are unused.)
const std::set<std::string_view> kTopIgnored = {
    "architectures", "model_type", "transformers_version", "dtype", "torch_dtype", "_name_or_path",
    "initializer_range",  // training-time init
    "vision_config",      // the tower is not run (images refused)
    "boi_token_id", "eoi_token_id", "image_token_id",  // image placeholders (images refused)
    // Gemma 4's other media fields, as a published config may carry them (media refused).
    "vision_soft_tokens_per_image", "video_token_id", "audio_token_id", "boa_token_id", "eoa_token_index",
    "eoa_token_id", "audio_config",
    // generate reads generation_config.json's (transformers' DiffusionGemmaGenerationConfig has
    // no from_model_config), so the model config's copies change nothing.
    "bos_token_id", "eos_token_id", "pad_token_id",
    "use_cache", "output_attentions", "output_hidden_states", "return_dict",
    "quantization_config",  // read by the quantization config (quant/quant_config.h), per module
};
const std::set<std::string_view> kTopRead = {"text_config", "canvas_length", "tie_word_embeddings"};
const std::set<std::string_view> kTextIgnored = {
    "model_type", "transformers_version", "dtype", "torch_dtype", "initializer_range",
    "attention_dropout",  // training only
    "bos_token_id",       // the prompt is given as ids
    "use_cache", "output_attentions", "output_hidden_states", "return_dict",
    "tie_word_embeddings",  // the top level's ties the lm_head (transformers reads that one)
};
const std::set<std::string_view> kTextRead = {
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "hidden_activation", "max_position_embeddings", "rms_norm_eps",
    "pad_token_id", "eos_token_id", "rope_parameters", "attention_bias", "sliding_window", "layer_types",
    "final_logit_softcapping", "use_bidirectional_attention", "num_experts", "top_k_experts",
    "moe_intermediate_size", "per_layer_config", "global_head_dim", "num_global_key_value_heads",
};

void check_keys(const json& j, const std::set<std::string_view>& read, const std::set<std::string_view>& ignored,
                const std::string& path, const char* where) {
  for (const auto& [k, v] : j.items()) {
    if (read.count(k) || ignored.count(k)) continue;
    fail("{}: DiffusionGemma: unknown field '{}{}' (fp4lm does not know what it changes)", path, where, k);
  }
}

std::vector<float> inv_freq_of(const json& rp, const std::string& path, const std::string& kind, int64_t head_dim) {
  const std::string field = "text_config.rope_parameters." + kind;
  if (!rp.is_object()) fail("{}: field '{}' must be an object", path, field);
  for (const auto& [k, v] : rp.items())
    if (k != "rope_type" && k != "rope_theta" && k != "partial_rotary_factor" && k != "factor")
      fail("{}: DiffusionGemma: unknown field '{}.{}'", path, field, k);
  const ConfigReader r{rp, path};
  const std::string type = r.opt<std::string>("rope_type", "default");
  const float theta = static_cast<float>(r.req<double>("rope_theta"));
  const double partial = r.opt<double>("partial_rotary_factor", 1.0);
  const double factor = r.opt<double>("factor", 1.0);
  std::vector<float> inv(static_cast<size_t>(head_dim / 2), 0.0f);
  if (type == "default") {
    // transformers' default RoPE over int(head_dim * partial) dims; cos/sin must cover the head.
    if (partial != 1.0 || r.has("factor"))
      fail("{}: DiffusionGemma: '{}' of rope_type default with partial_rotary_factor {} / factor is not supported "
           "(the rotation would not cover the head)",
           path, field, partial);
    for (int64_t i = 0; i < head_dim / 2; ++i)
      inv[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
  } else if (type == "proportional") {
    // Gemma 4's proportional RoPE: the first int(partial * head_dim // 2) angles rotate with
    // exponents over the whole head_dim, the rest have frequency 0 (no rotation).
    const int64_t angles = static_cast<int64_t>(std::floor(partial * static_cast<double>(head_dim) / 2.0));
    for (int64_t i = 0; i < angles && i < head_dim / 2; ++i)
      inv[i] = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    for (float& f : inv) f = static_cast<float>(f / factor);
  } else {
    fail("{}: DiffusionGemma: '{}.rope_type' {} is not supported (default, proportional)", path, field, type);
  }
  return inv;
}

}  // namespace

bool is_diffusion_gemma(const json& config) {
  if (config.contains("architectures") && config["architectures"].is_array() && !config["architectures"].empty() &&
      config["architectures"][0] == kDiffusionGemmaArch)
    return true;
  return config.contains("model_type") && config["model_type"] == "diffusion_gemma";
}

DiffusionGemmaConfig parse_diffusion_gemma_config(const json& config, const std::string& path) {
  check_keys(config, kTopRead, kTopIgnored, path, "");
  const ConfigReader top{config, path};
  if (!top.has("text_config") || !config["text_config"].is_object())
    fail("{}: DiffusionGemma: missing required object 'text_config'", path);
  const json& t = config["text_config"];
  check_keys(t, kTextRead, kTextIgnored, path, "text_config.");
  const ConfigReader r{t, path};
  DiffusionGemmaConfig c;
  c.canvas_length = top.opt<int64_t>("canvas_length", 256);
  top.positive("canvas_length", c.canvas_length);
  c.tie_word_embeddings = top.opt<bool>("tie_word_embeddings", true);
  c.vocab_size = r.opt<int64_t>("vocab_size", 262144);
  c.hidden_size = r.opt<int64_t>("hidden_size", 2304);
  c.intermediate_size = r.opt<int64_t>("intermediate_size", 9216);
  c.num_layers = r.opt<int64_t>("num_hidden_layers", 30);
  c.num_heads = r.opt<int64_t>("num_attention_heads", 8);
  const int64_t kv_heads = r.opt<int64_t>("num_key_value_heads", 4);
  const int64_t head_dim = r.opt<int64_t>("head_dim", 256);
  c.max_position_embeddings = r.opt<int64_t>("max_position_embeddings", 131072);
  c.rms_norm_eps = r.opt<double>("rms_norm_eps", 1e-6);
  c.pad_token_id = r.opt<int64_t>("pad_token_id", 0);
  if (r.has("eos_token_id")) {
    if (t["eos_token_id"].is_array()) c.eos_token_ids = r.int_list("eos_token_id");
    else c.eos_token_ids = {r.get<int64_t>("eos_token_id")};
  } else {
    c.eos_token_ids = {1};
  }
  c.sliding_window = r.opt<int64_t>("sliding_window", 512);
  c.final_logit_softcapping = r.opt<double>("final_logit_softcapping", 30.0);
  c.num_experts = r.req<int64_t>("num_experts");
  c.top_k_experts = r.req<int64_t>("top_k_experts");
  c.moe_intermediate_size = r.req<int64_t>("moe_intermediate_size");
  for (const char* k : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "num_experts", "top_k_experts", "moe_intermediate_size", "sliding_window"})
    r.positive(k, r.opt<int64_t>(k, 1));
  r.positive("num_key_value_heads", kv_heads);
  r.positive("head_dim", head_dim);
  if (c.top_k_experts > c.num_experts)
    fail("{}: field 'text_config.top_k_experts' ({}) exceeds num_experts ({})", path, c.top_k_experts, c.num_experts);
  if (r.opt<std::string>("hidden_activation", "gelu_pytorch_tanh") != "gelu_pytorch_tanh")
    fail("{}: DiffusionGemma: 'text_config.hidden_activation' {} is not supported (gelu_pytorch_tanh)", path,
         t["hidden_activation"].dump());
  if (r.opt<bool>("attention_bias", false))
    fail("{}: DiffusionGemma: 'text_config.attention_bias' true is not supported", path);
  if (r.has("use_bidirectional_attention")) {
    const std::string b = r.get<std::string>("use_bidirectional_attention");
    // "vision" changes the mask only around image tokens, which fp4lm does not take for this model.
    if (b != "vision")
      fail("{}: DiffusionGemma: 'text_config.use_bidirectional_attention' \"{}\" is not supported (null or "
           "\"vision\")",
           path, b);
  }

  // layer_types: transformers' default is 5 sliding : 1 full; the last layer is forced to full.
  std::vector<std::string> types;
  if (r.has("layer_types")) {
    if (!t["layer_types"].is_array() || static_cast<int64_t>(t["layer_types"].size()) != c.num_layers)
      fail("{}: field 'text_config.layer_types' must be a list of num_hidden_layers ({}) strings", path, c.num_layers);
    for (const json& v : t["layer_types"]) {
      if (!v.is_string() || (v != "sliding_attention" && v != "full_attention"))
        fail("{}: field 'text_config.layer_types' holds {} (sliding_attention, full_attention)", path, v.dump());
      types.push_back(v.get<std::string>());
    }
  } else {
    for (int64_t i = 0; i < c.num_layers; ++i) types.push_back((i + 1) % 6 ? "sliding_attention" : "full_attention");
  }
  if (types.back() != "full_attention") {
    log().warn("{}: DiffusionGemma: the last layer must be full_attention (transformers forces it)", path);
    types.back() = "full_attention";
  }

  // Full-attention layers: head_dim / KV heads from per_layer_config (as transformers saves it) or
  // from global_head_dim / num_global_key_value_heads (its inputs).
  const int64_t global_head_dim = r.opt<int64_t>("global_head_dim", 512);
  const int64_t global_kv = r.opt<int64_t>("num_global_key_value_heads", kv_heads);
  json per_layer = json::object();
  if (r.has("per_layer_config")) {
    per_layer = t["per_layer_config"];
    if (!per_layer.is_object()) fail("{}: field 'text_config.per_layer_config' must be an object", path);
    for (const auto& [k, v] : per_layer.items()) {
      int64_t idx = -1;
      try {
        size_t used = 0;
        idx = std::stoll(k, &used);
        if (used != k.size()) idx = -1;
      } catch (const std::exception&) {
        idx = -1;
      }
      if (idx < 0 || idx >= c.num_layers || !v.is_object())
        fail("{}: field 'text_config.per_layer_config' key '{}' must be a layer index below {} with an object", path,
             k, c.num_layers);
      for (const auto& [kk, vv] : v.items())
        if (kk != "head_dim" && kk != "num_key_value_heads")
          fail("{}: DiffusionGemma: unknown field 'text_config.per_layer_config.{}.{}'", path, k, kk);
    }
  }
  if (!r.has("rope_parameters") || !t["rope_parameters"].is_object())
    fail("{}: DiffusionGemma: missing required object 'text_config.rope_parameters'", path);
  const json& rope = t["rope_parameters"];
  for (const auto& [k, v] : rope.items())
    if (k != "sliding_attention" && k != "full_attention")
      fail("{}: DiffusionGemma: unknown field 'text_config.rope_parameters.{}'", path, k);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    DiffusionGemmaLayerConfig L;
    L.sliding = types[i] == "sliding_attention";
    L.head_dim = L.sliding ? head_dim : global_head_dim;
    L.kv_heads = L.sliding ? kv_heads : global_kv;
    if (r.has("per_layer_config")) {
      // As saved: exactly the full-attention layers listed with their overrides.
      const std::string key = std::to_string(i);
      L.head_dim = head_dim;
      L.kv_heads = kv_heads;
      if (per_layer.contains(key)) {
        const ConfigReader pl{per_layer[key], path};
        L.head_dim = pl.opt<int64_t>("head_dim", head_dim);
        L.kv_heads = pl.opt<int64_t>("num_key_value_heads", kv_heads);
      }
    }
    if (L.head_dim <= 0 || L.head_dim % 2 || L.kv_heads <= 0 || c.num_heads % L.kv_heads)
      fail("{}: DiffusionGemma: layer {}: head_dim {} must be positive and even, num_attention_heads {} a multiple of "
           "its {} KV heads",
           path, i, L.head_dim, c.num_heads, L.kv_heads);
    if (!rope.contains(types[i])) fail("{}: DiffusionGemma: missing 'text_config.rope_parameters.{}'", path, types[i]);
    L.inv_freq = inv_freq_of(rope[types[i]], path, types[i], L.head_dim);
    c.layers.push_back(std::move(L));
  }
  return c;
}

// ---- weights ----

namespace {

// A dense 2-D weight [rows, cols] in the mapped checkpoint (or an expert's slice of a 3-D one).
struct Mat {
  const TensorView* t = nullptr;
  int64_t rows = 0, cols = 0;
  int64_t offset = 0;  // elements before row 0
  void row(int64_t r, float* out) const {
    const size_t es = dtype_size(t->dtype);
    to_f32_n(t->data + static_cast<size_t>(offset + r * cols) * es, t->dtype, out, static_cast<size_t>(cols));
  }
};

std::vector<float> to_vec(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  to_f32_n(t.data, t.dtype, v.data(), v.size());
  return v;
}

// transformers' DiffusionGemmaRMSNorm: x * (mean(x²) + eps)^-0.5 [* weight] over rows of `dim`.
void rms_norm(float* x, int64_t n, int64_t dim, const float* weight, double eps) {
  for (int64_t i = 0; i < n; ++i) {
    float* xi = x + i * dim;
    double ss = 0;
    for (int64_t c = 0; c < dim; ++c) ss += static_cast<double>(xi[c]) * xi[c];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(dim) + eps);
    for (int64_t c = 0; c < dim; ++c) xi[c] = static_cast<float>(xi[c] * inv * (weight ? weight[c] : 1.0f));
  }
}

float gelu_tanh(float x) {
  const double d = x;
  return static_cast<float>(0.5 * d * (1.0 + std::tanh(0.7978845608028654 * (d + 0.044715 * d * d * d))));
}

// gelu_tanh(gate) · up of a fused gate_up Linear over x [n, in]: [n, inter].
std::vector<float> gated_gelu(const Linear& gate_up, const float* x, int64_t n, int64_t inter) {
  std::vector<float> gu(static_cast<size_t>(n * 2 * inter)), out(static_cast<size_t>(n * inter));
  gate_up.forward(x, n, gu.data());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t t = 0; t < inter; ++t)
      out[i * inter + t] = gelu_tanh(gu[i * 2 * inter + t]) * gu[i * 2 * inter + inter + t];
  return out;
}

void rope(float* x, int64_t head_dim, const std::vector<float>& inv_freq, int64_t pos) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    // As transformers: the angle in float32, cos/sin of it.
    const float ang = static_cast<float>(pos) * inv_freq[i];
    const double c = std::cos(ang), s = std::sin(ang);
    const double a = x[i], b = x[i + half];
    x[i] = static_cast<float>(a * c - b * s);
    x[i + half] = static_cast<float>(b * c + a * s);
  }
}

}  // namespace

struct DiffusionGemma::Weights {
  struct Layer {
    // Gemma 4's engine layers (model/arch/gemma4.cpp's plan): q/k(/v) fused into qkv_proj, gate/up
    // into gate_up_proj, the router a Linear, the experts one FusedMoe; each in its stored format.
    std::unique_ptr<Linear> qkv, o, gate_up, down, router;
    std::unique_ptr<FusedMoe> experts;
    bool has_v = false;
    std::vector<float> q_norm, k_norm, input_ln, post_attn_ln, pre_ff_ln, post_ff_ln, post_ff_ln1, post_ff_ln2,
        pre_ff_ln2, router_scale, per_expert_scale;
    float encoder_scalar = 1, decoder_scalar = 1;
  };
  std::vector<Layer> layers;
  Mat embed;  // rows read from the mapped checkpoint (never quantized by the exporters)
  std::unique_ptr<Linear> lm_head, sc_gate_up, sc_down;
  std::vector<float> final_norm, sc_pre_norm;
  DType act_dtype = DType::F32;
};

DiffusionGemma::~DiffusionGemma() = default;

const std::optional<nlohmann::json>& DiffusionGemma::generation_config() const { return ckpt_->generation_config(); }

namespace {

// The Gemma 4 text config whose plan is DiffusionGemma's blocks: its text_config with the MoE
// block and the full layers' k_eq_v (no v_proj) switched on and no per-layer input embeddings.
json gemma4_blocks_config(const json& config) {
  json g = json::object();
  for (const auto& [k, v] : config["text_config"].items())
    if (!v.is_null() && k != "model_type" && k != "transformers_version") g[k] = v;
  g["architectures"] = json::array({"Gemma4ForCausalLM"});
  g["model_type"] = "gemma4_text";
  g["enable_moe_block"] = true;
  g["attention_k_eq_v"] = true;
  g["hidden_size_per_layer_input"] = 0;
  g["tie_word_embeddings"] = config.value("tie_word_embeddings", true);
  g.erase("torch_dtype");
  g.erase("dtype");
  for (const char* k : {"dtype", "torch_dtype"})
    if (config.contains(k) && config[k].is_string()) g[k] = config[k];
  return g;
}

}  // namespace

std::unique_ptr<DiffusionGemma> DiffusionGemma::load(const std::string& dir, const EngineOptions& opts) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<DiffusionGemma> m(new DiffusionGemma());
  m->ckpt_ = io::Checkpoint::open(dir);
  const io::Checkpoint& ck = *m->ckpt_;
  const std::string cfg_path = dir + "/config.json";
  m->cfg_ = parse_diffusion_gemma_config(ck.config(), cfg_path);
  const DiffusionGemmaConfig& c = m->cfg_;
  auto w = std::make_unique<Weights>();

  // The encoder and decoder share their weights (transformers' _tied_weights_keys); a checkpoint
  // stores each once, under either module's name: both read as Gemma 4's "model." (the decoder's
  // first), the quantization config's module names likewise.
  ModelLoader loader(m->ckpt_, opts, gemma4_blocks_config(ck.config()),
                     {{"model.decoder.", "model."}, {"model.encoder.language_model.", "model."}});
  w->act_dtype = loader.dtype();

  auto find_shared = [&](const std::string& rest, bool encoder_first) -> const TensorView& {
    const std::string dec = "model.decoder." + rest, enc = "model.encoder.language_model." + rest;
    const std::string& a = encoder_first ? enc : dec;
    const std::string& b = encoder_first ? dec : enc;
    const TensorView* t = ck.find(a);
    const std::string* name = &a;
    if (!t) {
      t = ck.find(b);
      name = &b;
    }
    if (!t) fail("{}: DiffusionGemma: tensor '{}' (or '{}') not found", dir, dec, enc);
    ck.mark_used(*name);
    if (t->dtype != DType::F32 && t->dtype != DType::BF16 && t->dtype != DType::F16)
      fail("{}: DiffusionGemma: tensor '{}' is {}; only float32 / bfloat16 / float16 are supported for it", dir,
           *name, dtype_name(t->dtype));
    return *t;
  };
  auto shape_check = [&](const TensorView& t, const std::string& name, Shape want) {
    if (t.shape != want)
      fail("{}: DiffusionGemma: tensor '{}' has shape {}, expected {}", dir, name, shape_str(t.shape), shape_str(want));
  };
  auto vec = [&](const std::string& rest, int64_t n) {
    const TensorView& t = find_shared(rest, false);
    shape_check(t, rest, {n});
    return to_vec(t);
  };
  const int64_t H = c.hidden_size;
  {
    const TensorView& e = find_shared("embed_tokens.weight", false);
    shape_check(e, "embed_tokens.weight", {c.vocab_size, H});
    w->embed = Mat{&e, c.vocab_size, H, 0};
  }
  w->lm_head = loader.load_linear("lm_head");
  w->final_norm = vec("norm.weight", H);
  {
    const std::string p = "model.decoder.self_conditioning.";
    const TensorView* pre = ck.find(p + "pre_norm.weight");
    if (!pre) fail("{}: DiffusionGemma: tensor '{}pre_norm.weight' not found", dir, p);
    ck.mark_used(p + "pre_norm.weight");
    shape_check(*pre, p + "pre_norm.weight", {H});
    w->sc_pre_norm = to_vec(*pre);
    w->sc_gate_up = loader.load_extra_linear(
        plan_linear(p + "gate_up_proj", -1, {p + "gate_proj", p + "up_proj"}, {c.intermediate_size, c.intermediate_size}, H));
    w->sc_down = loader.load_extra_linear(plan_linear(p + "down_proj", -1, {p + "down_proj"}, {H}, c.intermediate_size));
  }
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const DiffusionGemmaLayerConfig& lc = c.layers[i];
    const std::string p = "layers." + std::to_string(i) + ".";
    const std::string e = "model.layers." + std::to_string(i) + ".";
    Weights::Layer L;
    L.qkv = loader.load_linear(e + "self_attn.qkv_proj");
    // Full-attention layers have no v_proj: the values are the keys' projection (attention_k_eq_v).
    L.has_v = lc.sliding;
    const int64_t want_qkv = (c.num_heads + (L.has_v ? 2 : 1) * lc.kv_heads) * lc.head_dim;
    if (L.qkv->out_features() != want_qkv)
      fail("{}: DiffusionGemma: layer {}'s q/k/v projections give {} outputs, expected {}", dir, i,
           L.qkv->out_features(), want_qkv);
    L.o = loader.load_linear(e + "self_attn.o_proj");
    L.q_norm = vec(p + "self_attn.q_norm.weight", lc.head_dim);
    L.k_norm = vec(p + "self_attn.k_norm.weight", lc.head_dim);
    L.input_ln = vec(p + "input_layernorm.weight", H);
    L.post_attn_ln = vec(p + "post_attention_layernorm.weight", H);
    L.pre_ff_ln = vec(p + "pre_feedforward_layernorm.weight", H);
    L.post_ff_ln = vec(p + "post_feedforward_layernorm.weight", H);
    L.post_ff_ln1 = vec(p + "post_feedforward_layernorm_1.weight", H);
    L.post_ff_ln2 = vec(p + "post_feedforward_layernorm_2.weight", H);
    L.pre_ff_ln2 = vec(p + "pre_feedforward_layernorm_2.weight", H);
    L.gate_up = loader.load_linear(e + "mlp.gate_up_proj");
    L.down = loader.load_linear(e + "mlp.down_proj");
    const GemmaMoeNames mn = gemma_moe_names(i);
    L.router = loader.load_linear(mn.router);
    L.router_scale = vec(p + "router.scale", H);
    L.per_expert_scale = vec(p + "router.per_expert_scale", c.num_experts);
    L.experts = loader.load_moe(mn.experts);
    // layer_scalar is a buffer, not tied: the encoder's and the decoder's are their own.
    auto scalar = [&](bool encoder_first) {
      const TensorView& t = find_shared(p + "layer_scalar", encoder_first);
      if (t.numel() != 1) fail("{}: DiffusionGemma: tensor '{}layer_scalar' must hold one value", dir, p);
      return to_vec(t)[0];
    };
    L.encoder_scalar = scalar(true);
    L.decoder_scalar = scalar(false);
    w->layers.push_back(std::move(L));
  }
  // Every stored tensor is consumed but the vision tower's and its projector's (images refused), and
  // an encoder copy of a decoder tensor the layers read (an exporter may write a tied module's
  // tensors under both names): equal bytes, or an input_scale (each side calibrated on its own
  // inputs; the decoder's is used for both, one WARN line).
  int64_t other_input_scales = 0;
  for (const std::string& name : ck.unused_tensor_names()) {
    if (name.rfind("model.encoder.vision_tower.", 0) == 0 || name.rfind("model.encoder.embed_vision.", 0) == 0)
      continue;
    const std::string enc = "model.encoder.language_model.";
    if (name.rfind(enc, 0) == 0) {
      const std::string dec = "model.decoder." + name.substr(enc.size());
      const TensorView* a = ck.find(name);
      const TensorView* b = ck.find(dec);
      if (a && b && a->dtype == b->dtype && a->shape == b->shape) {
        if (std::equal(a->data, a->data + a->nbytes, b->data)) continue;
        if (name.ends_with(".input_scale")) {
          ++other_input_scales;
          continue;
        }
      }
      fail("{}: DiffusionGemma: tensor '{}' differs from (or has no) decoder copy '{}'; the encoder and decoder "
           "share their weights",
           dir, name, dec);
    }
    fail("{}: DiffusionGemma: tensor '{}' is not used by any layer (unexpected in this architecture)", dir, name);
  }
  if (other_input_scales > 0)
    log().warn("{}: DiffusionGemma: {} encoder input_scale tensors differ from the decoder's; the decoder's are used "
               "for both passes (they share their layers)",
               dir, other_input_scales);
  m->w_ = std::move(w);
  m->a16_max_tokens_ = opts.a16_max_tokens;
  m->weight_bytes_ = loader.loaded_weight_bytes();
  m->load_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  log().info("DiffusionGemma: {} layers, hidden {}, {} experts (top {}), canvas {} tokens, {} activations, {} weight "
             "bytes, loaded in {:.3f} s",
             c.num_layers, c.hidden_size, c.num_experts, c.top_k_experts, c.canvas_length,
             dtype_name(m->w_->act_dtype), loader.loaded_weight_bytes(), m->load_seconds_);
  return m;
}

DiffusionGemmaCache DiffusionGemma::new_cache() const {
  DiffusionGemmaCache cache;
  cache.layers.resize(static_cast<size_t>(cfg_.num_layers));
  return cache;
}

// The blocks over x [rows, H], the segments' rows one after the other, each at its positions,
// attending to its cache's K/V (kept rows) plus its own new rows: causally (and within the window
// on sliding layers) for the encoder, which then appends the new K/V to each segment's `write`,
// bidirectionally over everything otherwise (the decoder, reading `read`). Every other step is
// row by row, so a row's result does not depend on the other segments.
std::vector<float> DiffusionGemma::run_layers(std::vector<float> x, std::span<const Segment> segs,
                                              bool encoder) const {
  const DiffusionGemmaConfig& c = cfg_;
  const int64_t H = c.hidden_size;
  int64_t n = 0;
  std::vector<int64_t> row0(segs.size());
  for (size_t si = 0; si < segs.size(); ++si) {
    row0[si] = n;
    n += segs[si].n;
  }
  std::vector<int32_t> seg_of(static_cast<size_t>(n));
  for (size_t si = 0; si < segs.size(); ++si)
    std::fill(seg_of.begin() + row0[si], seg_of.begin() + row0[si] + segs[si].n, static_cast<int32_t>(si));
  auto cache_of = [&](size_t si) -> const DiffusionGemmaCache& { return encoder ? *segs[si].write : *segs[si].read; };
  std::vector<float> h(static_cast<size_t>(n * H));
  for (int64_t li = 0; li < c.num_layers; ++li) {
    const DiffusionGemmaLayerConfig& lc = c.layers[li];
    const Weights::Layer& L = w_->layers[li];
    const int64_t D = lc.head_dim, KV = lc.kv_heads, NH = c.num_heads, group = NH / KV;
    // Attention.
    std::copy(x.begin(), x.end(), h.begin());
    rms_norm(h.data(), n, H, L.input_ln.data(), c.rms_norm_eps);
    std::vector<float> q(static_cast<size_t>(n * NH * D)), k(static_cast<size_t>(n * KV * D)),
        v(static_cast<size_t>(n * KV * D));
    {
      const int64_t nq = NH * D, nk = KV * D, width = L.qkv->out_features();
      std::vector<float> qkv(static_cast<size_t>(n * width));
      L.qkv->forward(h.data(), n, qkv.data());
      for (int64_t i = 0; i < n; ++i) {
        const float* r = qkv.data() + i * width;
        std::copy(r, r + nq, q.data() + i * nq);
        std::copy(r + nq, r + nq + nk, k.data() + i * nk);
        // Without v_proj the values are the raw key projection, normed below without scale.
        const float* vr = L.has_v ? r + nq + nk : r + nq;
        std::copy(vr, vr + nk, v.data() + i * nk);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const size_t si = static_cast<size_t>(seg_of[i]);
      const int64_t pos = segs[si].pos0 + (i - row0[si]);
      for (int64_t hd = 0; hd < NH; ++hd) {
        float* qh = q.data() + (i * NH + hd) * D;
        rms_norm(qh, 1, D, L.q_norm.data(), c.rms_norm_eps);
        rope(qh, D, lc.inv_freq, pos);
      }
      for (int64_t hd = 0; hd < KV; ++hd) {
        float* kh = k.data() + (i * KV + hd) * D;
        rms_norm(kh, 1, D, L.k_norm.data(), c.rms_norm_eps);
        rope(kh, D, lc.inv_freq, pos);
        rms_norm(v.data() + (i * KV + hd) * D, 1, D, nullptr, c.rms_norm_eps);
      }
    }
    std::vector<float> att(static_cast<size_t>(n * NH * D));
    ThreadPool::global().parallel_for(n * NH, [&](int64_t b, int64_t e, int) {
      std::vector<double> s;
      std::vector<double> acc(static_cast<size_t>(D));
      for (int64_t qi = b; qi < e; ++qi) {
        const int64_t i = qi / NH, hd = qi % NH, g = hd / group;
        const size_t si = static_cast<size_t>(seg_of[i]);
        const Segment& sg = segs[si];
        const DiffusionGemmaCache& cache = cache_of(si);
        const DiffusionGemmaCache::Layer& cl = cache.layers[li];
        const int64_t old_rows = cl.rows, total = old_rows + sg.n;
        const int64_t first_pos = cache.length - old_rows;  // position of the first kept row
        const float* new_k = k.data() + row0[si] * KV * D;
        const float* new_v = v.data() + row0[si] * KV * D;
        auto key = [&](int64_t j) { return j < old_rows ? cl.k.data() + j * KV * D : new_k + (j - old_rows) * KV * D; };
        auto val = [&](int64_t j) { return j < old_rows ? cl.v.data() + j * KV * D : new_v + (j - old_rows) * KV * D; };
        s.resize(static_cast<size_t>(total));
        const int64_t p = sg.pos0 + (i - row0[si]);
        const float* qv = q.data() + qi * D;
        double mx = -INFINITY;
        for (int64_t j = 0; j < total; ++j) {
          const int64_t pj = first_pos + j;
          bool visible = true;
          if (encoder) visible = pj <= p && (!lc.sliding || pj > p - c.sliding_window);
          if (!visible) {
            s[j] = -INFINITY;
            continue;
          }
          const float* kv = key(j) + g * D;
          double d = 0;
          for (int64_t t = 0; t < D; ++t) d += static_cast<double>(qv[t]) * kv[t];
          s[j] = d;  // scaling 1.0 (q_norm / k_norm take its place)
          mx = std::max(mx, d);
        }
        double sum = 0;
        for (int64_t j = 0; j < total; ++j) sum += (s[j] = s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx));
        float* out = att.data() + qi * D;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < total; ++j) {
          if (s[j] == 0.0) continue;
          const float* vv = val(j) + g * D;
          for (int64_t t = 0; t < D; ++t) acc[t] += s[j] * vv[t];
        }
        for (int64_t t = 0; t < D; ++t) out[t] = static_cast<float>(acc[t] / sum);
      }
    });
    if (encoder) {
      for (size_t si = 0; si < segs.size(); ++si) {
        DiffusionGemmaCache::Layer& wl = segs[si].write->layers[li];
        const auto kb = k.begin() + row0[si] * KV * D, ke = kb + segs[si].n * KV * D;
        const auto vb = v.begin() + row0[si] * KV * D, ve = vb + segs[si].n * KV * D;
        wl.k.insert(wl.k.end(), kb, ke);
        wl.v.insert(wl.v.end(), vb, ve);
        wl.rows += segs[si].n;
        // transformers' DynamicSlidingWindowLayer keeps the last sliding_window - 1 positions.
        if (lc.sliding && wl.rows > c.sliding_window - 1) {
          const int64_t drop = wl.rows - (c.sliding_window - 1);
          wl.k.erase(wl.k.begin(), wl.k.begin() + drop * KV * D);
          wl.v.erase(wl.v.begin(), wl.v.begin() + drop * KV * D);
          wl.rows -= drop;
        }
      }
    }
    L.o->forward(att.data(), n, h.data());
    rms_norm(h.data(), n, H, L.post_attn_ln.data(), c.rms_norm_eps);
    for (size_t t = 0; t < x.size(); ++t) x[t] += h[t];

    // Dense MLP and MoE side by side on the same residual.
    const int64_t I = c.intermediate_size, E = c.num_experts;
    std::copy(x.begin(), x.end(), h.begin());
    rms_norm(h.data(), n, H, L.pre_ff_ln.data(), c.rms_norm_eps);
    std::vector<float> g1 = gated_gelu(*L.gate_up, h.data(), n, I);
    std::vector<float> h1(static_cast<size_t>(n * H));
    L.down->forward(g1.data(), n, h1.data());
    rms_norm(h1.data(), n, H, L.post_ff_ln1.data(), c.rms_norm_eps);

    // Router on the residual: norm without scale, × scale × hidden^-0.5, softmax, top-k,
    // renormalized, × per_expert_scale.
    std::vector<float> rx(x);
    rms_norm(rx.data(), n, H, nullptr, c.rms_norm_eps);
    const float root = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
    for (int64_t i = 0; i < n; ++i)
      for (int64_t t = 0; t < H; ++t) rx[i * H + t] = rx[i * H + t] * L.router_scale[t] * root;
    std::vector<float> scores(static_cast<size_t>(n * E));
    L.router->forward(rx.data(), n, scores.data());
    std::vector<float> ex(x);
    rms_norm(ex.data(), n, H, L.pre_ff_ln2.data(), c.rms_norm_eps);
    const int64_t K = c.top_k_experts;
    std::vector<int32_t> ids(static_cast<size_t>(n * K));
    std::vector<float> weights(static_cast<size_t>(n * K));
    for (int64_t i = 0; i < n; ++i) {
      const float* sc = scores.data() + i * E;
      const double mx = *std::max_element(sc, sc + E);
      std::vector<double> prob(static_cast<size_t>(E));
      double z = 0;
      for (int64_t e = 0; e < E; ++e) z += (prob[e] = std::exp(sc[e] - mx));
      for (double& pr : prob) pr /= z;
      std::vector<int64_t> order(static_cast<size_t>(E));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return prob[a] > prob[b]; });
      double top_sum = 0;
      for (int64_t r = 0; r < K; ++r) top_sum += prob[order[r]];
      for (int64_t r = 0; r < K; ++r) {
        const int64_t e = order[r];
        ids[i * K + r] = static_cast<int32_t>(e);
        weights[i * K + r] = static_cast<float>(prob[e] / top_sum) * L.per_expert_scale[e];
      }
    }
    std::vector<float> h2(static_cast<size_t>(n * H), 0.0f);
    L.experts->forward(ex.data(), n, ids.data(), weights.data(), K, h2.data());
    rms_norm(h2.data(), n, H, L.post_ff_ln2.data(), c.rms_norm_eps);
    for (size_t t = 0; t < h1.size(); ++t) h1[t] += h2[t];
    rms_norm(h1.data(), n, H, L.post_ff_ln.data(), c.rms_norm_eps);
    const float scalar = encoder ? L.encoder_scalar : L.decoder_scalar;
    for (size_t t = 0; t < x.size(); ++t) x[t] = (x[t] + h1[t]) * scalar;
  }
  if (encoder)
    for (const Segment& sg : segs) sg.write->length += sg.n;
  rms_norm(x.data(), n, H, w_->final_norm.data(), c.rms_norm_eps);
  return x;
}

std::vector<float> DiffusionGemma::logits_of(std::vector<float> x, int64_t n) const {
  std::vector<float> logits(static_cast<size_t>(n * cfg_.vocab_size));
  w_->lm_head->forward(x.data(), n, logits.data());
  if (cfg_.final_logit_softcapping > 0) {
    const double cap = cfg_.final_logit_softcapping;
    for (float& l : logits) l = static_cast<float>(std::tanh(l / cap) * cap);
  }
  return logits;
}

template <class Rows, class Group>
void DiffusionGemma::by_a16_choice(size_t count, Rows rows, Group group) const {
  std::vector<size_t> all(count);
  std::iota(all.begin(), all.end(), size_t{0});
  if (a16_max_tokens_ <= 0) {
    group(std::span<const size_t>(all));
    return;
  }
  // As a single sequence's call decides (m <= a16_max_tokens), whatever else is in the batch.
  std::vector<size_t> small, large;
  for (size_t i : all) (rows(i) <= a16_max_tokens_ ? small : large).push_back(i);
  if (!small.empty()) {
    kernels::A16Scope a16(kernels::A16Choice::a16);
    group(std::span<const size_t>(small));
  }
  if (!large.empty()) {
    kernels::A16Scope a4(kernels::A16Choice::a4);
    group(std::span<const size_t>(large));
  }
}

std::vector<std::vector<float>> DiffusionGemma::encode_group(std::span<const EncodeItem> items, bool logits) const {
  const int64_t H = cfg_.hidden_size;
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(H)));
  std::vector<Segment> segs;
  int64_t n = 0;
  for (const EncodeItem& it : items) {
    const int64_t ni = static_cast<int64_t>(it.ids.size());
    if (ni == 0) continue;
    if (it.cache->length + ni > cfg_.max_position_embeddings)
      fail("DiffusionGemma: {} positions exceed max_position_embeddings {}", it.cache->length + ni,
           cfg_.max_position_embeddings);
    for (const Segment& sg : segs)
      if (sg.write == it.cache) fail("DiffusionGemma: a cache appears twice in one encoder batch");
    segs.push_back({ni, it.cache->length, nullptr, it.cache});
    n += ni;
  }
  std::vector<std::vector<float>> out(items.size());
  if (n == 0) return out;
  std::vector<float> x(static_cast<size_t>(n * H));
  int64_t r = 0;
  for (const EncodeItem& it : items)
    for (int32_t id : it.ids) {
      if (id < 0 || id >= cfg_.vocab_size)
        fail("DiffusionGemma: token id {} is outside the vocabulary (size {})", id, cfg_.vocab_size);
      w_->embed.row(id, x.data() + r * H);
      for (int64_t t = 0; t < H; ++t) x[r * H + t] *= scale;
      ++r;
    }
  std::vector<float> hidden = run_layers(std::move(x), segs, /*encoder=*/true);
  if (!logits) return out;
  const std::vector<float> all = logits_of(std::move(hidden), n);
  const size_t V = static_cast<size_t>(cfg_.vocab_size);
  size_t off = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const size_t len = items[i].ids.size() * V;
    out[i].assign(all.begin() + static_cast<std::ptrdiff_t>(off), all.begin() + static_cast<std::ptrdiff_t>(off + len));
    off += len;
  }
  return out;
}

std::vector<float> DiffusionGemma::encode(DiffusionGemmaCache& cache, std::span<const int32_t> ids, bool logits) const {
  if (ids.empty()) return {};
  const EncodeItem item{&cache, ids};
  std::vector<std::vector<float>> out;
  by_a16_choice(1, [&](size_t) { return static_cast<int64_t>(ids.size()); },
                [&](std::span<const size_t>) { out = encode_group({&item, 1}, logits); });
  return std::move(out[0]);
}

void DiffusionGemma::encode_batch(std::span<const EncodeItem> items) const {
  by_a16_choice(
      items.size(), [&](size_t i) { return static_cast<int64_t>(items[i].ids.size()); },
      [&](std::span<const size_t> idx) {
        std::vector<EncodeItem> group;
        for (size_t i : idx) group.push_back(items[i]);
        encode_group(group, false);
      });
}

std::vector<std::vector<float>> DiffusionGemma::decode_group(std::span<const DecodeItem> items) const {
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  std::vector<Segment> segs;
  int64_t n = 0;
  for (const DecodeItem& it : items) {
    const int64_t ni = static_cast<int64_t>(it.canvas.size());
    if (!it.self_conditioning.empty() && static_cast<int64_t>(it.self_conditioning.size()) != ni * V)
      fail("DiffusionGemma: self-conditioning logits hold {} values, expected {} x {}", it.self_conditioning.size(), ni,
           V);
    segs.push_back({ni, it.cache->length, it.cache, nullptr});
    n += ni;
  }
  std::vector<std::vector<float>> out(items.size());
  if (n == 0) return out;
  const float scale = static_cast<float>(std::sqrt(static_cast<double>(H)));
  std::vector<float> x(static_cast<size_t>(n * H));
  // Each row's self-conditioning logits (null: none, the first step's zeros).
  std::vector<const float*> sc_row(static_cast<size_t>(n), nullptr);
  int64_t r = 0;
  for (const DecodeItem& it : items)
    for (size_t i = 0; i < it.canvas.size(); ++i, ++r) {
      const int32_t id = it.canvas[i];
      if (id < 0 || id >= V) fail("DiffusionGemma: canvas token id {} is outside the vocabulary (size {})", id, V);
      w_->embed.row(id, x.data() + r * H);
      for (int64_t t = 0; t < H; ++t) x[r * H + t] *= scale;
      if (!it.self_conditioning.empty()) sc_row[r] = it.self_conditioning.data() + static_cast<int64_t>(i) * V;
    }
  // Self-conditioning: softmax(previous logits) · embed_tokens × embed_scale (zeros on the first
  // step), through pre_norm and a gated MLP, added to the embeddings, then a scale-free norm.
  std::vector<float> soft(static_cast<size_t>(n * H), 0.0f);
  ThreadPool::global().parallel_for(n, [&](int64_t b, int64_t e, int) {
    std::vector<float> row(static_cast<size_t>(H));
    std::vector<double> p(static_cast<size_t>(V)), acc(static_cast<size_t>(H));
    for (int64_t i = b; i < e; ++i) {
      const float* l = sc_row[i];
      if (!l) continue;
      const double mx = *std::max_element(l, l + V);
      double z = 0;
      for (int64_t t = 0; t < V; ++t) z += (p[t] = std::exp(static_cast<double>(l[t]) - mx));
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t t = 0; t < V; ++t) {
        const double pt = p[t] / z;
        if (pt == 0.0) continue;
        w_->embed.row(t, row.data());
        for (int64_t d = 0; d < H; ++d) acc[d] += pt * row[d];
      }
      for (int64_t d = 0; d < H; ++d) soft[i * H + d] = static_cast<float>(acc[d]) * scale;
    }
  });
  rms_norm(soft.data(), n, H, w_->sc_pre_norm.data(), cfg_.rms_norm_eps);
  const int64_t I = cfg_.intermediate_size;
  std::vector<float> g = gated_gelu(*w_->sc_gate_up, soft.data(), n, I), sc(static_cast<size_t>(n * H));
  w_->sc_down->forward(g.data(), n, sc.data());
  for (size_t t = 0; t < x.size(); ++t) x[t] += sc[t];
  rms_norm(x.data(), n, H, nullptr, cfg_.rms_norm_eps);
  std::vector<float> hidden = run_layers(std::move(x), segs, /*encoder=*/false);
  const std::vector<float> all = logits_of(std::move(hidden), n);
  size_t off = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    const size_t len = items[i].canvas.size() * static_cast<size_t>(V);
    out[i].assign(all.begin() + static_cast<std::ptrdiff_t>(off), all.begin() + static_cast<std::ptrdiff_t>(off + len));
    off += len;
  }
  return out;
}

std::vector<float> DiffusionGemma::decode(const DiffusionGemmaCache& cache, std::span<const int32_t> canvas,
                                          std::span<const float> self_conditioning) const {
  const DecodeItem item{&cache, canvas, self_conditioning};
  return std::move(decode_batch({&item, 1})[0]);
}

std::vector<std::vector<float>> DiffusionGemma::decode_batch(std::span<const DecodeItem> items) const {
  std::vector<std::vector<float>> out(items.size());
  by_a16_choice(
      items.size(), [&](size_t i) { return static_cast<int64_t>(items[i].canvas.size()); },
      [&](std::span<const size_t> idx) {
        std::vector<DecodeItem> group;
        for (size_t i : idx) group.push_back(items[i]);
        std::vector<std::vector<float>> r = decode_group(group);
        for (size_t k = 0; k < idx.size(); ++k) out[idx[k]] = std::move(r[k]);
      });
  return out;
}

}  // namespace fp4lm::model
