// NemotronHForCausalLM (NVIDIA Nemotron-H: Nemotron-Nano-9B-v2, Nemotron-H-8B/47B/56B, and the
// Nemotron 3 family's dense layers), with transformers' NemotronHConfig semantics. Every decoder
// layer is one mixer behind one RMSNorm, h += mixer(norm(h)), the mixer chosen by the layer's
// letter in hybrid_override_pattern (or layers_block_type):
//   'M' Mamba-2 (model/layers/mamba2_mixer.h)        '*' attention: GQA, no position encoding
//   '-' MLP: down_proj(relu(up_proj(h))²)      'E' MoE (model/layers/nemotron_moe.h, latent or not)
// Tensors live under backbone. (read as model.): embeddings, layers.<i>.{norm, mixer.*}, norm_f;
// lm_head at the top. The MTP layers (num_nextn_predict_layers, tensors mtp.*) are not read.
// The VL / Omni wrappers (NemotronH_Nano_VL_V2: Nemotron-Nano-12B-v2-VL; NemotronH_Nano_Omni_Reasoning_V3)
// keep this model's config under llm_config and every tensor of it under language_model.
// (language_model.backbone.*, language_model.lm_head.weight), beside the RADIO vision tower
// (vision_model.radio_model.*), its projector (mlp1.*) and, for Omni, the sound encoder
// (sound_encoder.*, sound_projection.*) — the layout vLLM's nano_nemotron_vl.py load_weights and
// llama.cpp's NemotronNanoV2VLModel converter read. The RADIO tower and projector load when the
// checkpoint has them (model/vision/nemotron_image_encoder.h; vision_config.args mapped by
// radio_remote_config.h, the processor's settings from config.json: vision/nemotron_remote_config.h);
// without them the wrapper runs text and refuses images. NemotronH_Omni_Reasoning_V3 (transformers
// 5.24's class for the same checkpoints: text_config, the vision_config of its RadioConfig) has the
// same layout and always loads the tower. No sound encoder is loaded.
#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "core/log.h"
#include "model/arch/arch.h"
#include "model/layers/attention.h"
#include "model/layers/mamba2_mixer.h"
#include "model/layers/nemotron_moe.h"
#include "model/layers/relu2_mlp.h"
#include "model/load/model_loader.h"
#include "model/vision/nemotron_image_encoder.h"

namespace fp4lm::model {

namespace {

std::string mixer_prefix(int64_t i) { return fmt::format("model.layers.{}.mixer", i); }
std::string norm_name(int64_t i) { return fmt::format("model.layers.{}.norm.weight", i); }

// h += mixer(norm(h)), the mixer a token mixer (Mamba-2, attention) or a feed-forward block.
class SingleMixerLayer final : public DecoderLayer {
 public:
  SingleMixerLayer(RmsNorm norm, std::unique_ptr<Mixer> mixer, std::unique_ptr<FeedForward> ffn)
      : norm_(std::move(norm)), mixer_(std::move(mixer)), ffn_(std::move(ffn)) {}
  void forward(const LayerStep& s) const override {
    add_residual(s, norm_, [&](const float* x, float* y) {
      if (mixer_) mixer_->forward(x, s.spans, y);
      else ffn_->forward(x, s.m, y);
    });
  }
  size_t own_param_bytes() const override {
    return static_cast<size_t>(norm_.dim()) * sizeof(float) + (mixer_ ? mixer_->own_param_bytes() : 0);
  }

 private:
  RmsNorm norm_;
  std::unique_ptr<Mixer> mixer_;
  std::unique_ptr<FeedForward> ffn_;
};

// layers_block_type's names (transformers 5, and the older remote code's) as pattern letters.
char letter_of(const std::string& type) {
  if (type == "mamba" || type == "linear_attention" || type == "M") return 'M';
  if (type == "attention" || type == "full_attention" || type == "*") return '*';
  if (type == "mlp" || type == "-") return '-';
  if (type == "moe" || type == "E") return 'E';
  return 0;
}

class NemotronH final : public ArchDef {
 public:
  explicit NemotronH(const char* name, bool wrapped = false, bool vision = false)
      : name_(name), wrapped_(wrapped), vision_(vision) {}
  std::string_view hf_name() const override { return name_; }

  std::optional<Wrapper> wrapper() const override {
    if (!wrapped_) return std::nullopt;
    return Wrapper{{"llm_config", "text_config"}, "language_model."};
  }

  // transformers 5 derives num_hidden_layers from the layer list and does not save it.
  void fill_config_defaults(nlohmann::json& j) const override {
    if (j.contains("num_hidden_layers") && !j["num_hidden_layers"].is_null()) return;
    if (j.contains("layers_block_type") && j["layers_block_type"].is_array())
      j["num_hidden_layers"] = j["layers_block_type"].size();
    else if (j.contains("hybrid_override_pattern") && j["hybrid_override_pattern"].is_string())
      j["num_hidden_layers"] = j["hybrid_override_pattern"].get<std::string>().size();
  }

  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    const nlohmann::json& j = r.j;
    const std::string& path = r.path;
    MambaConfig& m = c.mamba;
    if (r.has("hybrid_override_pattern")) {
      m.pattern = r.get<std::string>("hybrid_override_pattern");
      for (char ch : m.pattern)
        if (ch != 'M' && ch != '*' && ch != '-' && ch != 'E')
          fail("{}: field 'hybrid_override_pattern' holds '{}' (expected M, *, - or E per layer)", path,
               std::string(1, ch));
    } else if (r.has("layers_block_type")) {
      const nlohmann::json& t = j["layers_block_type"];
      if (!t.is_array()) fail("{}: field 'layers_block_type' must be a list, found {}", path, t.dump());
      for (const nlohmann::json& v : t) {
        const char ch = v.is_string() ? letter_of(v.get<std::string>()) : 0;
        if (!ch)
          fail("{}: field 'layers_block_type' holds {} (expected mamba, attention, mlp or moe)", path, v.dump());
        m.pattern.push_back(ch);
      }
    } else {
      fail("{}: missing required field 'hybrid_override_pattern' (or 'layers_block_type')", path);
    }
    if (static_cast<int64_t>(m.pattern.size()) != c.num_layers)
      fail("{}: the layer pattern '{}' has {} layers but num_hidden_layers is {}", path, m.pattern, m.pattern.size(),
           c.num_layers);
    if (m.pattern.find('E') != std::string::npos) read_moe_keys(r, c);
    c.rms_norm_eps = r.opt<double>("layer_norm_epsilon", 1e-5);
    // Attention: head_dim (or the older attention_head_dim); no RoPE, so no rotary keys.
    if (r.has("attention_head_dim") && !r.has("head_dim")) c.head_dim = r.get<int64_t>("attention_head_dim");
    r.positive("head_dim", c.head_dim);
    c.rotary_dim = c.head_dim;
    for (int64_t i = 0; i < c.num_layers; ++i) c.attention[i].rope = false;  // NoPE attention layers
    // The activations are mlp_hidden_act and mamba_hidden_act; hidden_act is no NemotronHConfig key
    // (the shared MLP's activation, unused here).
    c.hidden_act = "silu";
    const std::string mlp_act = r.opt<std::string>("mlp_hidden_act", "relu2");
    if (mlp_act != "relu2") fail("{}: unsupported mlp_hidden_act '{}' (supported: relu2)", path, mlp_act);
    const std::string mamba_act = r.opt<std::string>("mamba_hidden_act", "silu");
    if (mamba_act != "silu") fail("{}: unsupported mamba_hidden_act '{}' (supported: silu)", path, mamba_act);
    m.mlp_bias = r.opt<bool>("mlp_bias", false);
    if (m.pattern.find('-') != std::string::npos) {
      c.intermediate_size = r.req<int64_t>("intermediate_size");
      r.positive("intermediate_size", c.intermediate_size);
    }
    // Mamba-2 (transformers accepts the older mamba_* spellings too).
    auto key = [&](const char* name, const char* old) { return r.has(name) || !r.has(old) ? name : old; };
    m.num_heads = r.opt<int64_t>("mamba_num_heads", 128);
    m.head_dim = r.opt<int64_t>("mamba_head_dim", 64);
    m.state_size = r.opt<int64_t>("ssm_state_size", 128);
    m.n_groups = r.opt<int64_t>(key("n_groups", "mamba_n_groups"), 8);
    m.conv_kernel = r.opt<int64_t>(key("conv_kernel", "mamba_d_conv"), 4);
    m.chunk_size = r.opt<int64_t>(key("chunk_size", "mamba_chunk_size"), 128);
    m.conv_bias = r.opt<bool>(key("use_conv_bias", "mamba_conv_bias"), true);
    m.proj_bias = r.opt<bool>("use_bias", r.opt<bool>("mamba_proj_bias", false));
    for (auto [k, v] : {std::pair{"mamba_num_heads", m.num_heads}, {"mamba_head_dim", m.head_dim},
                        {"ssm_state_size", m.state_size}, {"n_groups", m.n_groups}, {"conv_kernel", m.conv_kernel},
                        {"chunk_size", m.chunk_size}})
      r.positive(k, v);
    if (m.num_heads % m.n_groups != 0)
      fail("{}: mamba_num_heads ({}) must be a multiple of n_groups ({})", path, m.num_heads, m.n_groups);
    // time_step_limit [lo, hi]. JSON has no infinity: Python's json writes Infinity (read as the
    // largest double), transformers 5 {"__float__": "Infinity"}; null is unbounded too.
    m.dt_min = 0.0;
    m.dt_max = std::numeric_limits<double>::infinity();
    const char* lim = key("time_step_limit", "mamba_dt_limit");
    if (r.has(lim)) {
      const nlohmann::json& l = j[lim];
      auto bound = [&](const nlohmann::json& v, double unbounded) {
        if (v.is_number()) return v.get<double>();
        if (v.is_null()) return unbounded;
        if (v.is_object() && v.size() == 1 && v.contains("__float__") && v["__float__"].is_string()) {
          const std::string f = v["__float__"].get<std::string>();
          if (f == "Infinity") return std::numeric_limits<double>::infinity();
          if (f == "-Infinity") return -std::numeric_limits<double>::infinity();
        }
        fail("{}: field '{}' must be a list of two numbers, found {}", path, lim, l.dump());
      };
      if (!l.is_array() || l.size() != 2)
        fail("{}: field '{}' must be a list of two numbers, found {}", path, lim, l.dump());
      m.dt_min = bound(l[0], 0.0);
      m.dt_max = bound(l[1], std::numeric_limits<double>::infinity());
      if (!(m.dt_min >= 0) || !(m.dt_max > m.dt_min))
        fail("{}: field '{}' must hold 0 <= lo < hi, found {}", path, lim, l.dump());
    }
    // transformers' NemotronH mixer clamps dt below at time_step_min (its time_step_limit is
    // (time_step_min, inf)); NVIDIA's remote code at time_step_limit's lower bound (0.0 in the
    // releases). The larger of the two is the clamp: transformers' semantics.
    const double ts_min = r.opt<double>(key("time_step_min", "mamba_dt_min"), 0.001);
    if (!(ts_min >= 0)) fail("{}: field 'time_step_min' must be >= 0, found {}", path, ts_min);
    m.dt_min = std::max(m.dt_min, ts_min);
    if (!(m.dt_max > m.dt_min))
      fail("{}: time_step_min {} is not below time_step_limit's upper bound {}", path, m.dt_min, m.dt_max);
    m.mtp_layers = r.has("num_nextn_predict_layers") && r.j["num_nextn_predict_layers"].is_number_integer()
                       ? r.j["num_nextn_predict_layers"].get<int64_t>()
                       : 0;
    m.ssm_cache_dtype = r.opt<std::string>("mamba_ssm_cache_dtype", "float32");
    if (m.ssm_cache_dtype != "float32" && m.ssm_cache_dtype != "bfloat16" && m.ssm_cache_dtype != "float16")
      fail("{}: unsupported mamba_ssm_cache_dtype '{}' (supported: float32, bfloat16, float16)", path,
           m.ssm_cache_dtype);
    // Tensor names: backbone.* stands for model.*, and two tensors have their own names.
    c.tensor_prefix = "backbone.";
    c.tensor_renames = {{"model.embed_tokens.weight", "backbone.embeddings.weight"},
                        {"model.norm.weight", "backbone.norm_f.weight"}};
  }

  // The 'E' layers' keys (transformers' NemotronHConfig names and defaults). transformers builds
  // one shared expert of moe_shared_expert_intermediate_size whatever n_shared_experts says.
  static void read_moe_keys(const ConfigReader& r, ModelConfig& c) {
    MoeConfig& moe = c.moe;
    const char* experts_key = r.has("n_routed_experts") || !r.has("num_local_experts") ? "n_routed_experts"
                                                                                        : "num_local_experts";
    moe.num_experts = r.req<int64_t>(experts_key);
    moe.top_k = r.req<int64_t>("num_experts_per_tok");
    moe.moe_intermediate_size = r.req<int64_t>("moe_intermediate_size");
    moe.shared_expert_intermediate_size = r.opt<int64_t>("moe_shared_expert_intermediate_size", 7688);
    moe.norm_topk_prob = r.opt<bool>("norm_topk_prob", true);
    moe.sigmoid.enabled = true;
    moe.sigmoid.n_group = r.opt<int64_t>("n_group", 1);
    moe.sigmoid.topk_group = r.opt<int64_t>("topk_group", 1);
    moe.sigmoid.routed_scaling_factor = r.opt<double>("routed_scaling_factor", 1.0);
    for (auto [k, v] : {std::pair{experts_key, moe.num_experts}, {"num_experts_per_tok", moe.top_k},
                        {"moe_intermediate_size", moe.moe_intermediate_size},
                        {"moe_shared_expert_intermediate_size", moe.shared_expert_intermediate_size},
                        {"n_group", moe.sigmoid.n_group}, {"topk_group", moe.sigmoid.topk_group}})
      r.positive(k, v);
    const int64_t groups = moe.sigmoid.n_group, per = moe.num_experts / groups;
    if (moe.num_experts % groups != 0 || (groups > 1 && per < 2))
      fail("{}: n_group ({}) must split the {} experts into equal groups of at least 2", r.path, groups,
           moe.num_experts);
    if (moe.sigmoid.topk_group > groups)
      fail("{}: topk_group ({}) exceeds n_group ({})", r.path, moe.sigmoid.topk_group, groups);
    if (moe.top_k > moe.sigmoid.topk_group * per)
      fail("{}: num_experts_per_tok ({}) exceeds the experts of topk_group={} groups ({})", r.path, moe.top_k,
           moe.sigmoid.topk_group, moe.sigmoid.topk_group * per);
    // moe_latent_size (Super / Ultra's latent MoE: fc1/fc2_latent_proj around the routed
    // experts): null or absent = none.
    if (r.has("moe_latent_size") && !r.j["moe_latent_size"].is_null()) {
      c.mamba.moe_latent_size = r.get<int64_t>("moe_latent_size");
      r.positive("moe_latent_size", c.mamba.moe_latent_size);
    }
  }

  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    const MambaConfig& m = c.mamba;
    const std::string p = mixer_prefix(i);
    if (m.layer_is(i, 'M')) {
      out.push_back(plan_linear(p + ".in_proj", i, {p + ".in_proj"}, {m.intermediate() + m.conv_dim() + m.num_heads},
                                c.hidden_size, m.proj_bias));
      out.push_back(plan_linear(p + ".out_proj", i, {p + ".out_proj"}, {c.hidden_size}, m.intermediate(), m.proj_bias));
    } else if (m.layer_is(i, '*')) {
      const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
      out.push_back(plan_linear(p + ".qkv_proj", i, {p + ".q_proj", p + ".k_proj", p + ".v_proj"}, {q, kv, kv},
                                c.hidden_size, c.attention_bias));
      out.push_back(plan_linear(p + ".o_proj", i, {p + ".o_proj"}, {c.hidden_size}, q, c.attention_bias));
    } else if (m.layer_is(i, 'E')) {
      const int64_t inter = c.moe.moe_intermediate_size, latent = m.moe_latent_size;
      const int64_t width = latent > 0 ? latent : c.hidden_size;  // the routed experts' input and output
      LayerSpec gate = plan_linear(p + ".gate", i, {p + ".gate"}, {c.moe.num_experts}, c.hidden_size);
      gate.router = true;
      gate.f32_act = true;  // transformers computes the router logits in float32
      out.push_back(gate);
      if (latent > 0)
        out.push_back(plan_linear(p + ".fc1_latent_proj", i, {p + ".fc1_latent_proj"}, {latent}, c.hidden_size,
                                  m.mlp_bias));
      for (int64_t e = 0; e < c.moe.num_experts; ++e) {
        const std::string x = fmt::format("{}.experts.{}", p, e);
        out.push_back(plan_linear(x + ".up_proj", i, {x + ".up_proj"}, {inter}, width));
        out.push_back(plan_linear(x + ".down_proj", i, {x + ".down_proj"}, {width}, inter));
      }
      if (latent > 0)
        out.push_back(
            plan_linear(p + ".fc2_latent_proj", i, {p + ".fc2_latent_proj"}, {c.hidden_size}, latent, m.mlp_bias));
      const std::string x = p + ".shared_experts";
      const int64_t si = c.moe.shared_expert_intermediate_size;
      out.push_back(plan_linear(x + ".up_proj", i, {x + ".up_proj"}, {si}, c.hidden_size, m.mlp_bias));
      out.push_back(plan_linear(x + ".down_proj", i, {x + ".down_proj"}, {c.hidden_size}, si, m.mlp_bias));
    } else {
      out.push_back(plan_linear(p + ".up_proj", i, {p + ".up_proj"}, {c.intermediate_size}, c.hidden_size, m.mlp_bias));
      out.push_back(
          plan_linear(p + ".down_proj", i, {p + ".down_proj"}, {c.hidden_size}, c.intermediate_size, m.mlp_bias));
    }
  }

  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override {
    std::vector<LayerParam> out = {{norm_name(i), {c.hidden_size}}};
    const MambaConfig& m = c.mamba;
    if (m.layer_is(i, 'E')) out.push_back({mixer_prefix(i) + ".gate.e_score_correction_bias", {c.moe.num_experts}});
    if (!m.layer_is(i, 'M')) return out;
    const std::string p = mixer_prefix(i) + ".";
    out.push_back({p + "conv1d.weight", {m.conv_dim(), 1, m.conv_kernel}});
    if (m.conv_bias) out.push_back({p + "conv1d.bias", {m.conv_dim()}});
    out.push_back({p + "A_log", {m.num_heads}});
    out.push_back({p + "D", {m.num_heads}});
    out.push_back({p + "dt_bias", {m.num_heads}});
    out.push_back({p + "norm.weight", {m.intermediate()}});
    return out;
  }

  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const override {
    const ModelConfig& c = b.loader.config();
    const bool tower = vision_ && NemotronImageEncoder::has_tower(b.loader);
    if (i == 0 && wrapped_ && tower)
      b.loader.log_once(fmt::format("{}: the language model and the vision tower (vision_model.*, mlp1.*); any sound "
                                    "encoder is skipped (image and text input)",
                                    c.architecture));
    else if (i == 0 && wrapped_)
      b.loader.log_once(fmt::format("{}: loading the language model only (language_model.*); the vision tower "
                                    "(vision_model.*), its projector (mlp1.*) and any sound encoder are skipped "
                                    "(text input only)",
                                    c.architecture));
    if (i == 0 && c.mamba.mtp_layers > 0)
      b.loader.log_once("Skipping the multi-token-prediction layers (num_nextn_predict_layers): not used for decoding");
    RmsNorm norm = load_rms_norm(b.loader, norm_name(i), c.hidden_size);
    if (c.mamba.layer_is(i, 'M'))
      return std::make_unique<SingleMixerLayer>(std::move(norm), std::make_unique<Mamba2Mixer>(b, i), nullptr);
    if (c.mamba.layer_is(i, '*'))
      return std::make_unique<SingleMixerLayer>(
          std::move(norm), std::make_unique<Attention>(b, i, AttentionLayout{.rope = c.attention[i].rope, .module = "mixer"}),
          nullptr);
    return std::make_unique<SingleMixerLayer>(std::move(norm), nullptr, make_ffn(b.loader, i));
  }

  // NemotronH_Omni_Reasoning_V3: the RADIO tower and its projector; nullptr without vision_config.
  std::unique_ptr<ImageEncoder> load_image_encoder(ModelLoader& l) const override {
    return vision_ ? NemotronImageEncoder::load(l) : nullptr;
  }

  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    if (l.config().mamba.layer_is(i, 'E')) return std::make_unique<NemotronMoe>(l, mixer_prefix(i));
    return std::make_unique<Relu2Mlp>(l, mixer_prefix(i));
  }

  // ModelOpt leaves every Mamba conv1d unquantized.
  std::vector<std::string> default_exclusions(const ModelConfig& c) const override {
    std::vector<std::string> out;
    for (int64_t i = 0; i < c.num_layers; ++i)
      if (c.mamba.layer_is(i, 'M')) out.push_back(mixer_prefix(i) + ".conv1d");
    return out;
  }

  // transformers' NemotronHForCausalLM: _keep_in_fp32_modules_strict = the router's weight and
  // its e_score_correction_bias.
  std::vector<std::string> float32_tensors(const ModelConfig& c) const override {
    std::vector<std::string> out;
    for (int64_t i = 0; i < c.num_layers; ++i)
      if (c.mamba.layer_is(i, 'E'))
        for (const char* t : {".gate.weight", ".gate.e_score_correction_bias"}) out.push_back(mixer_prefix(i) + t);
    return out;
  }

  void synthetic_config(const SampleShape& o, nlohmann::json& c) const override {
    if (wrapped_) fail("synthetic checkpoints of {} are not written (write NemotronHForCausalLM and wrap it)", name_);
    c["model_type"] = "nemotron_h";
    std::string pattern = o.hybrid_pattern;
    pattern.resize(static_cast<size_t>(o.layers), '-');
    for (size_t i = o.hybrid_pattern.size(); i < pattern.size(); ++i) pattern[i] = "M-M*"[i % 4];
    c["hybrid_override_pattern"] = pattern;
    c.erase("rms_norm_eps");
    c.erase("hidden_act");
    c.erase("rope_theta");
    c["layer_norm_epsilon"] = 1e-5;
    c["mlp_hidden_act"] = "relu2";
    c["mamba_hidden_act"] = "silu";
    c["mamba_num_heads"] = o.mamba_heads;
    c["mamba_head_dim"] = o.mamba_head_dim;
    c["ssm_state_size"] = o.ssm_state;
    c["n_groups"] = o.mamba_groups;
    c["conv_kernel"] = o.conv_kernel;
    c["chunk_size"] = 128;
    c["use_conv_bias"] = true;
    c["use_bias"] = false;
    c["mlp_bias"] = false;
    c["time_step_limit"] = {0.0, nullptr};
    c["mamba_ssm_cache_dtype"] = "float32";
    c["residual_in_fp32"] = false;
    if (pattern.find('E') != std::string::npos) {
      c["n_routed_experts"] = o.experts;
      c["num_experts_per_tok"] = o.top_k;
      c["moe_intermediate_size"] = o.moe_intermediate;
      c["moe_shared_expert_intermediate_size"] = o.shared_expert_intermediate;
      c["n_group"] = 1;
      c["topk_group"] = 1;
      c["norm_topk_prob"] = true;
      c["routed_scaling_factor"] = 2.5;
      if (o.moe_latent > 0) c["moe_latent_size"] = o.moe_latent;
    }
  }

 private:
  const char* name_;
  bool wrapped_;
  bool vision_;
};

}  // namespace

const ArchDef& nemotron_h_arch() {
  static const NemotronH d("NemotronHForCausalLM");
  return d;
}
const ArchDef& nemotron_h_vl_arch() {
  static const NemotronH d("NemotronH_Nano_VL_V2", true, /*vision=*/true);
  return d;
}
const ArchDef& nemotron_h_omni_arch() {
  static const NemotronH d("NemotronH_Nano_Omni_Reasoning_V3", true, /*vision=*/true);
  return d;
}
const ArchDef& nemotron_h_omni_v3_arch() {
  static const NemotronH d("NemotronH_Omni_Reasoning_V3", true, /*vision=*/true);
  return d;
}

}  // namespace fp4lm::model
