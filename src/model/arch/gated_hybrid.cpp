#include "model/arch/gated_hybrid.h"

#include <algorithm>

#include <fmt/format.h>

#include "model/layers/attention.h"
#include "model/layers/gated_delta_net.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

void read_gated_hybrid_keys(const ConfigReader& r, ModelConfig& c) {
  const nlohmann::json& j = r.j;
  const std::string& path = r.path;
  c.zero_centered_norm = true;
  c.qk_norm = true;
  c.attn_output_gate = r.opt<bool>("attn_output_gate", true);
  c.gdn.linear_num_key_heads = r.req<int64_t>("linear_num_key_heads");
  c.gdn.linear_num_value_heads = r.req<int64_t>("linear_num_value_heads");
  c.gdn.linear_key_head_dim = r.req<int64_t>("linear_key_head_dim");
  c.gdn.linear_value_head_dim = r.req<int64_t>("linear_value_head_dim");
  c.gdn.linear_conv_kernel = r.opt<int64_t>("linear_conv_kernel_dim", 4);
  for (auto [k, v] : {std::pair{"linear_num_key_heads", c.gdn.linear_num_key_heads},
                      {"linear_num_value_heads", c.gdn.linear_num_value_heads},
                      {"linear_key_head_dim", c.gdn.linear_key_head_dim},
                      {"linear_value_head_dim", c.gdn.linear_value_head_dim},
                      {"linear_conv_kernel_dim", c.gdn.linear_conv_kernel}})
    r.positive(k, v);
  if (c.gdn.linear_num_value_heads % c.gdn.linear_num_key_heads != 0)
    fail("{}: linear_num_value_heads ({}) must be a multiple of linear_num_key_heads ({})", path,
         c.gdn.linear_num_value_heads, c.gdn.linear_num_key_heads);
  if (r.has("layer_types")) {
    const nlohmann::json& t = j["layer_types"];
    if (!t.is_array() || static_cast<int64_t>(t.size()) != c.num_layers)
      fail("{}: field 'layer_types' must list {} layer types (num_hidden_layers), found {}", path, c.num_layers,
           t.dump());
    for (const nlohmann::json& v : t) {
      const std::string s = v.is_string() ? v.get<std::string>() : v.dump();
      if (s != "full_attention" && s != "linear_attention")
        fail("{}: field 'layer_types' holds '{}' (expected full_attention or linear_attention)", path, s);
      c.gdn.full_attention.push_back(s == "full_attention");
    }
  } else {
    const int64_t every = r.opt<int64_t>("full_attention_interval", 4);
    r.positive("full_attention_interval", every);
    for (int64_t i = 0; i < c.num_layers; ++i) c.gdn.full_attention.push_back((i + 1) % every == 0);
  }
  if (c.num_attention_layers() == 0)
    fail("{}: no full_attention layer (layer_types / full_attention_interval); fp4lm needs at least one", path);
  // rope_parameters (Qwen3.5, newer Qwen3-Next exports) or top-level keys (Qwen3-Next). For text,
  // mrope's three position ids are all the token index, so mrope_section is plain RoPE. Both HF
  // configs default partial_rotary_factor to 0.25.
  double factor = r.opt<double>("partial_rotary_factor", 0.25);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    ConfigReader rp{j["rope_parameters"], path};
    c.rope_theta = rp.opt<double>("rope_theta", c.rope_theta);
    factor = rp.opt<double>("partial_rotary_factor", factor);
    const std::string type = rp.opt<std::string>("rope_type", "default");
    if (type != "default") fail("{}: unsupported rope_parameters.rope_type '{}' (supported: default)", path, type);
    if (rp.has("mrope_section")) {
      const nlohmann::json& ms = rp.j["mrope_section"];
      if (!ms.is_array())
        fail("{}: rope_parameters.mrope_section must be a list of 3 integers, found {}", path, ms.dump());
      for (const auto& v : ms) {
        if (!v.is_number_integer())
          fail("{}: rope_parameters.mrope_section must be a list of 3 integers, found {}", path, ms.dump());
        c.mrope_section.push_back(v.get<int64_t>());
      }
    }
    c.mrope_interleaved = rp.opt<bool>("mrope_interleaved", false);
  }
  c.rotary_dim = static_cast<int64_t>(static_cast<double>(c.head_dim) * factor);
  if (c.rotary_dim <= 0 || c.rotary_dim > c.head_dim || c.rotary_dim % 2 != 0)
    fail("{}: partial_rotary_factor {} gives rotary dims {} (must be even, in (0, head_dim {}])", path, factor,
         c.rotary_dim, c.head_dim);
  // mrope_section splits the rotary_dim / 2 frequency pairs between a token's t, h and w
  // positions (image tokens, model/layers/mrope_positions.h); for text all three are the token index.
  // (Interleaved, as transformers: pair i takes h when i % 3 == 1 and i < 3 * section[1], w when
  // i % 3 == 2 and i < 3 * section[2], else t; so the counts need not add up to rotary_dim / 2.)
  if (!c.mrope_section.empty() &&
      (c.mrope_section.size() != 3 || *std::min_element(c.mrope_section.begin(), c.mrope_section.end()) < 0))
    fail("{}: rope_parameters.mrope_section must be 3 non-negative counts (t, h, w), found {}", path,
         nlohmann::json(c.mrope_section).dump());
  // The MTP head after the decoder layers (mtp.*): Qwen3.5 names its depth mtp_num_hidden_layers,
  // Qwen3-Next num_nextn_predict_layers. Read only for speculative decoding (model/layers/mtp_head.h).
  c.num_nextn_predict_layers = r.opt<int64_t>("mtp_num_hidden_layers", r.opt<int64_t>("num_nextn_predict_layers", 0));
  if (c.num_nextn_predict_layers < 0)
    fail("{}: field 'mtp_num_hidden_layers' must be >= 0, found {}", path, c.num_nextn_predict_layers);
  const std::string ssm = r.opt<std::string>("mamba_ssm_dtype", "float32");
  if (ssm != "float32") fail("{}: unsupported mamba_ssm_dtype '{}' (supported: float32)", path, ssm);
}

void plan_gated_hybrid_mixer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) {
  if (c.layer_is_attention(i)) return plan_attention(c, i, out);
  const std::string a = fmt::format("model.layers.{}.linear_attn", i);
  const int64_t nv = c.gdn.linear_num_value_heads, vd = nv * c.gdn.linear_value_head_dim;
  if (c.gdn.fused_qkvz) {
    // Qwen3-Next: per key head [q k v z] rows in one in_proj_qkvz, [b a] in one in_proj_ba.
    out.push_back(
        plan_linear(a + ".in_proj_qkvz", i, {a + ".in_proj_qkvz"}, {c.gdn.conv_dim() + vd}, c.hidden_size));
    LayerSpec ba = plan_linear(a + ".in_proj_ba", i, {a + ".in_proj_ba"}, {2 * nv}, c.hidden_size);
    ba.router = true;
    out.push_back(ba);
  } else {
    out.push_back(plan_linear(a + ".in_proj_qkv", i, {a + ".in_proj_qkv"}, {c.gdn.conv_dim()}, c.hidden_size));
    out.push_back(plan_linear(a + ".in_proj_z", i, {a + ".in_proj_z"}, {vd}, c.hidden_size));
    LayerSpec ba = plan_linear(a + ".in_proj_ba", i, {a + ".in_proj_b", a + ".in_proj_a"}, {nv, nv}, c.hidden_size);
    ba.router = true;
    out.push_back(ba);
  }
  out.push_back(plan_linear(a + ".out_proj", i, {a + ".out_proj"}, {c.hidden_size}, vd));
}

std::vector<LayerParam> gated_hybrid_layer_params(const ModelConfig& c, int64_t i) {
  const std::string p = fmt::format("model.layers.{}.", i);
  const PreNormNames n = pre_norm_names(i);
  std::vector<LayerParam> out = {{n.input, {c.hidden_size}}, {n.post, {c.hidden_size}}};
  if (c.layer_is_attention(i)) {
    out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
    out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
  } else {
    const std::string a = p + "linear_attn.";
    out.push_back({a + "conv1d.weight", {c.gdn.conv_dim(), 1, c.gdn.linear_conv_kernel}});
    out.push_back({a + "A_log", {c.gdn.linear_num_value_heads}});
    out.push_back({a + "dt_bias", {c.gdn.linear_num_value_heads}});
    out.push_back({a + "norm.weight", {c.gdn.linear_value_head_dim}});
  }
  return out;
}

std::unique_ptr<Mixer> make_gated_hybrid_mixer(const LayerBuild& b, int64_t i) {
  if (b.loader.config().layer_is_attention(i)) return std::make_unique<Attention>(b, i);
  return std::make_unique<GatedDeltaNet>(b, i);
}

std::vector<std::string> gated_hybrid_default_exclusions(const ModelConfig& c) {
  std::vector<std::string> out;
  for (int64_t i = 0; i < c.num_layers; ++i)
    if (!c.layer_is_attention(i)) out.push_back(fmt::format("model.layers.{}.linear_attn.conv1d", i));
  return out;
}

void gated_hybrid_synthetic_config(const SampleShape& o, nlohmann::json& c) {
  nlohmann::json types = nlohmann::json::array();
  for (int64_t i = 0; i < o.layers; ++i)
    types.push_back((i + 1) % o.full_attention_interval == 0 ? "full_attention" : "linear_attention");
  c["layer_types"] = types;
  c["full_attention_interval"] = o.full_attention_interval;
  c["linear_num_key_heads"] = o.linear_key_heads;
  c["linear_num_value_heads"] = o.linear_value_heads;
  c["linear_key_head_dim"] = o.linear_key_head_dim;
  c["linear_value_head_dim"] = o.linear_value_head_dim;
  c["linear_conv_kernel_dim"] = o.conv_kernel;
}

void qwen3_5_synthetic_config(const SampleShape& o, nlohmann::json& c) {
  gated_hybrid_synthetic_config(o, c);
  c["attn_output_gate"] = true;
  c["mamba_ssm_dtype"] = "float32";
  c.erase("rope_theta");
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25},
                          {"mrope_section", {1, 1, 0}}, {"mrope_interleaved", true}};
}

}  // namespace fp4lm::model
