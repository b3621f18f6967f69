#pragma once
// The float64 forward of the Qwen3.5 (dense and MoE) / Qwen3-Next hybrids written for the tests from the
// published math (issue 14), not from the engine: the conv runs over the zero-padded whole
// sequence, the delta rule as the textbook recurrence over all positions, attention recomputed
// per position, experts one by one. Plus the tiny random models it runs on and their checkpoint
// writers: flat or VL layout; GDN projections separate (Qwen3.5) or packed into in_proj_qkvz /
// in_proj_ba interleaved per key head exactly as transformers'
// Qwen3NextGatedDeltaNet.fix_query_key_value_ordering unpacks them (Qwen3-Next); experts per
// expert (2-D) or fused 3-D (gate_up_proj [E, 2I, D], gate rows first; down_proj [E, D, I]).
#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "model/causal_lm.h"
#include "reference/logits_check.h"
#include "quant/nvfp4.h"

namespace fp4lm::model::hybrid_ref {

using nlohmann::json;
using Vec = std::vector<double>;

struct T {
  Shape shape;
  std::vector<float> v;
};
// How a quantized checkpoint's routed experts see their inputs (the block input and the SwiGLU
// product): unchanged, rounded to bfloat16 (W4A16 kernels under the bfloat16 activation
// override), or quantize-dequantized to NVFP4 with the layer's input_scale (W4A4), by the
// library's reference quantizer (quant/nvfp4.h), the published NVFP4 math.
enum class ExpertInput { exact, bf16, nvfp4 };
// Which hybrid: Qwen3.5-MoE (every layer a MoE), dense Qwen3.5 (every layer a SwiGLU MLP of
// intermediate_size) or Qwen3-Next (fused GDN projections, layer 2 dense, top-k not renormalized).
enum class Family { qwen3_5_moe, qwen3_5, qwen3_next };

struct Hybrid {
  json config;
  std::map<std::string, T> w;
  // dims
  int64_t hidden = 32, heads = 4, kvh = 2, hd = 16, rot = 8, nk = 2, nv = 2, dk = 8, dv = 12, kconv = 4;
  int64_t experts = 4, top_k = 2, inter = 16, shared = 24, vocab = 97, layers = 4, dense_inter = 40;
  std::vector<bool> full;
  Family family = Family::qwen3_5_moe;
  bool next = false;        // Qwen3NextForCausalLM: fused in_proj_qkvz / in_proj_ba on disk
  bool norm_topk = true;    // renormalize the top-k router weights
  std::vector<bool> dense;  // layers with a dense MLP (Qwen3-Next mlp_only_layers); empty: none
  bool is_dense(int64_t l) const { return !dense.empty() && dense[l]; }
  ExpertInput expert_input = ExpertInput::exact;
  // How every other module stored as NVFP4 sees its input (nvfp4: with its own input_scale).
  ExpertInput linear_input = ExpertInput::exact;
  std::map<int64_t, std::pair<float, float>> input_scale;  // layer -> (gate/up, down) for nvfp4
  // Modules stored as NVFP4 (their m.w entry holds the dequantized weight the reference uses),
  // with the input_scale written for each (0: none, W4A16).
  std::map<std::string, quant::Nvfp4Weight> nvfp4;
  std::map<std::string, float> nvfp4_input_scale;
  // The MTP head (add_mtp): its layer's weights live in `w` as decoder layer `layers`
  // (model.layers.<layers>.*) and are written as mtp.layers.0.*.
  bool mtp = false;
};

// Random weights of the test models, drawn in the order asked from one generator: a tensor
// ~ N(mean, sd²), a Linear's [n, k] weight ~ N(0, 1/k).
struct RandomWeights {
  std::map<std::string, T>& w;
  std::mt19937_64 rng;
  void add(const std::string& name, Shape shape, float sd, float mean = 0.0f) {
    std::normal_distribution<float> d(mean, sd);
    T t{shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)))};
    for (float& x : t.v) x = d(rng);
    w[name] = std::move(t);
  }
  void lin(const std::string& name, int64_t n, int64_t k) {
    add(name + ".weight", {n, k}, 1.0f / std::sqrt(static_cast<float>(k)));
  }
};

// Stores `module` as NVFP4 (its m.w entry becomes the dequantized weight the reference uses),
// quantized by the library's reference quantizer; input_scale 0: W4A16 (none written). For any
// test model with the maps w / nvfp4 / nvfp4_input_scale (Hybrid, gemma_ref::Gemma).
template <class Model>
inline void quantize_module(Model& m, const std::string& module, float input_scale = 0.0f) {
  T& t = m.w.at(module + ".weight");
  quant::Nvfp4Weight q = quant::quantize_weight(t.v.data(), t.shape[0], t.shape[1]);
  t.v = quant::dequantize_weight(q);
  m.nvfp4[module] = std::move(q);
  m.nvfp4_input_scale[module] = input_scale;
}

// Quantizes every routed expert to NVFP4 (each module its own weight_scale_2) with the
// library's reference quantizer; w4a4: also write input_scale (gate/up s13, down s2 per layer).
inline void quantize_experts(Hybrid& m, bool w4a4, float s13 = 5.0f / 2688, float s2 = 2.0f / 2688) {
  for (int64_t l = 0; l < m.layers; ++l) {
    if (m.is_dense(l)) continue;
    m.input_scale[l] = {s13, s2};
    for (int64_t e = 0; e < m.experts; ++e)
      for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
        const std::string mod = fmt::format("model.layers.{}.mlp.experts.{}.{}", l, e, proj);
        quantize_module(m, mod, w4a4 ? (std::string(proj) == "down_proj" ? s2 : s13) : 0.0f);
      }
  }
}

// The weights of decoder layer l (model.layers.<l>.*): full attention or GDN as m.full[l] says,
// a dense MLP or the MoE as m.is_dense(l) says.
inline void add_layer_weights(Hybrid& m, RandomWeights& rw, int64_t l) {
  auto add = [&](const std::string& name, Shape shape, float sd, float mean = 0.0f) { rw.add(name, shape, sd, mean); };
  auto lin = [&](const std::string& name, int64_t n, int64_t k) { rw.lin(name, n, k); };
  const std::string p = fmt::format("model.layers.{}", l);
  add(p + ".input_layernorm.weight", {m.hidden}, 0.1f);
  add(p + ".post_attention_layernorm.weight", {m.hidden}, 0.1f);
  if (m.full[l]) {
    lin(p + ".self_attn.q_proj", 2 * m.heads * m.hd, m.hidden);
    lin(p + ".self_attn.k_proj", m.kvh * m.hd, m.hidden);
    lin(p + ".self_attn.v_proj", m.kvh * m.hd, m.hidden);
    lin(p + ".self_attn.o_proj", m.hidden, m.heads * m.hd);
    add(p + ".self_attn.q_norm.weight", {m.hd}, 0.1f);
    add(p + ".self_attn.k_norm.weight", {m.hd}, 0.1f);
  } else {
    const std::string a = p + ".linear_attn";
    lin(a + ".in_proj_qkv", 2 * m.nk * m.dk + m.nv * m.dv, m.hidden);
    lin(a + ".in_proj_z", m.nv * m.dv, m.hidden);
    lin(a + ".in_proj_b", m.nv, m.hidden);
    lin(a + ".in_proj_a", m.nv, m.hidden);
    lin(a + ".out_proj", m.hidden, m.nv * m.dv);
    add(a + ".conv1d.weight", {2 * m.nk * m.dk + m.nv * m.dv, 1, m.kconv}, 0.4f);
    add(a + ".A_log", {m.nv}, 0.5f);
    add(a + ".dt_bias", {m.nv}, 0.5f);
    add(a + ".norm.weight", {m.dv}, 0.1f, 1.0f);  // a plain weight
  }
  const std::string b = p + ".mlp";
  if (m.is_dense(l)) {
    lin(b + ".gate_proj", m.dense_inter, m.hidden);
    lin(b + ".up_proj", m.dense_inter, m.hidden);
    lin(b + ".down_proj", m.hidden, m.dense_inter);
    return;
  }
  lin(b + ".gate", m.experts, m.hidden);
  for (int64_t e = 0; e < m.experts; ++e) {
    const std::string ep = fmt::format("{}.experts.{}", b, e);
    lin(ep + ".gate_proj", m.inter, m.hidden);
    lin(ep + ".up_proj", m.inter, m.hidden);
    lin(ep + ".down_proj", m.hidden, m.inter);
  }
  lin(b + ".shared_expert.gate_proj", m.shared, m.hidden);
  lin(b + ".shared_expert.up_proj", m.shared, m.hidden);
  lin(b + ".shared_expert.down_proj", m.hidden, m.shared);
  lin(b + ".shared_expert_gate", 1, m.hidden);
}

// Layers: linear, full, linear, full (layer_types given); NV = nk * ratio. qwen3_next: its
// config keys (top-level rope_theta and partial_rotary_factor), layer 2 a dense MLP
// (mlp_only_layers) and the top-k weights not renormalized (norm_topk_prob false). qwen3_5:
// no MoE keys, intermediate_size, a dense MLP in every layer.
inline Hybrid make_hybrid(int64_t ratio, uint64_t seed = 11, Family family = Family::qwen3_5_moe) {
  Hybrid m;
  m.family = family;
  m.nv = m.nk * ratio;
  const bool next = family == Family::qwen3_next;
  if (next) {
    m.next = true;
    m.norm_topk = false;
    m.dense = {false, false, true, false};
  }
  if (family == Family::qwen3_5) {
    m.dense = std::vector<bool>(static_cast<size_t>(m.layers), true);
    m.dense_inter = 48;  // down_proj's input a multiple of 16, so it can be stored as NVFP4
  }
  m.full = {false, true, false, true};
  json types = json::array();
  for (bool f : m.full) types.push_back(f ? "full_attention" : "linear_attention");
  m.config = {{"architectures", {"Qwen3_5MoeForCausalLM"}},
              {"model_type", "qwen3_5_moe_text"},
              {"vocab_size", m.vocab},
              {"hidden_size", m.hidden},
              {"num_hidden_layers", m.layers},
              {"num_attention_heads", m.heads},
              {"num_key_value_heads", m.kvh},
              {"head_dim", m.hd},
              {"max_position_embeddings", 256},
              {"rms_norm_eps", 1e-6},
              {"hidden_act", "silu"},
              {"tie_word_embeddings", false},
              {"layer_types", types},
              {"linear_num_key_heads", m.nk},
              {"linear_num_value_heads", m.nv},
              {"linear_key_head_dim", m.dk},
              {"linear_value_head_dim", m.dv},
              {"linear_conv_kernel_dim", m.kconv},
              {"attn_output_gate", true},
              {"num_experts", m.experts},
              {"num_experts_per_tok", m.top_k},
              {"moe_intermediate_size", m.inter},
              {"shared_expert_intermediate_size", m.shared},
              {"mamba_ssm_dtype", "float32"},
              {"rope_parameters",
               {{"rope_type", "default"}, {"rope_theta", 1000.0}, {"partial_rotary_factor", 0.5},
                {"mrope_section", {2, 1, 1}}, {"mrope_interleaved", true}}},
              {"eos_token_id", 2},
              {"torch_dtype", "float32"}};
  if (next) {
    for (const char* k : {"rope_parameters", "attn_output_gate", "mamba_ssm_dtype"}) m.config.erase(k);
    m.config["architectures"] = {"Qwen3NextForCausalLM"};
    m.config["model_type"] = "qwen3_next";
    m.config["rope_theta"] = 1000.0;
    m.config["partial_rotary_factor"] = 0.5;
    m.config["norm_topk_prob"] = false;
    m.config["decoder_sparse_step"] = 1;
    m.config["mlp_only_layers"] = {2};
    m.config["intermediate_size"] = m.dense_inter;
  }
  if (family == Family::qwen3_5) {
    for (const char* k : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "shared_expert_intermediate_size"})
      m.config.erase(k);
    m.config["architectures"] = {"Qwen3_5ForCausalLM"};
    m.config["model_type"] = "qwen3_5_text";
    m.config["intermediate_size"] = m.dense_inter;
  }
  RandomWeights rw{m.w, std::mt19937_64(seed)};
  auto add = [&](const std::string& name, Shape shape, float sd, float mean = 0.0f) { rw.add(name, shape, sd, mean); };
  auto lin = [&](const std::string& name, int64_t n, int64_t k) { rw.lin(name, n, k); };
  add("model.embed_tokens.weight", {m.vocab, m.hidden}, 1.0f);
  add("model.norm.weight", {m.hidden}, 0.1f);  // zero-centered: the scale is 1 + w
  lin("lm_head", m.vocab, m.hidden);
  for (int64_t l = 0; l < m.layers; ++l) add_layer_weights(m, rw, l);
  return m;
}

// Adds the MTP head of Qwen3.5 / Qwen3-Next (mtp_num_hidden_layers 1, or Qwen3-Next's
// num_nextn_predict_layers): pre_fc_norm_embedding / pre_fc_norm_hidden, fc [hidden, 2·hidden],
// one full-attention layer (MoE, or a dense MLP in dense Qwen3.5), norm.
inline void add_mtp(Hybrid& m, uint64_t seed = 5) {
  RandomWeights rw{m.w, std::mt19937_64(seed)};
  m.mtp = true;
  m.full.push_back(true);
  if (!m.dense.empty()) m.dense.push_back(m.family == Family::qwen3_5);
  add_layer_weights(m, rw, m.layers);
  rw.add("mtp.pre_fc_norm_embedding.weight", {m.hidden}, 0.1f);
  rw.add("mtp.pre_fc_norm_hidden.weight", {m.hidden}, 0.1f);
  rw.add("mtp.norm.weight", {m.hidden}, 0.1f);
  rw.lin("mtp.fc", m.hidden, 2 * m.hidden);
  m.config[m.next ? "num_nextn_predict_layers" : "mtp_num_hidden_layers"] = 1;
}

// Packs the per-module GDN weights of a Qwen3-Next model into HF's fused tensors: per key head
// h, in_proj_qkvz rows [q_h, k_h, v of value heads h·r … h·r+r-1, z of the same] and in_proj_ba
// rows [b of those value heads, a of those value heads] (r = NV/NK).
inline void pack_qwen3_next(const Hybrid& m, const std::string& a, io::SafetensorsWriter& st) {
  const int64_t r = m.nv / m.nk, kd = m.nk * m.dk, D = m.hidden;
  const auto& qkv = m.w.at(a + ".in_proj_qkv.weight").v;
  const auto& z = m.w.at(a + ".in_proj_z.weight").v;
  const auto& bw = m.w.at(a + ".in_proj_b.weight").v;
  const auto& aw = m.w.at(a + ".in_proj_a.weight").v;
  std::vector<float> qkvz, ba;
  auto rows = [&](std::vector<float>& out, const std::vector<float>& src, int64_t row0, int64_t n) {
    out.insert(out.end(), src.begin() + row0 * D, src.begin() + (row0 + n) * D);
  };
  for (int64_t h = 0; h < m.nk; ++h) {
    rows(qkvz, qkv, h * m.dk, m.dk);                       // q_h
    rows(qkvz, qkv, kd + h * m.dk, m.dk);                  // k_h
    rows(qkvz, qkv, 2 * kd + h * r * m.dv, r * m.dv);      // v of its value heads
    rows(qkvz, z, h * r * m.dv, r * m.dv);                 // z of its value heads
    rows(ba, bw, h * r, r);
    rows(ba, aw, h * r, r);
  }
  st.add(a + ".in_proj_qkvz.weight", DType::F32, {2 * kd + 2 * m.nv * m.dv, D}, qkvz);
  st.add(a + ".in_proj_ba.weight", DType::F32, {2 * m.nv, D}, ba);
}

// The per-expert weights <src>.<e>.{gate,up,down}_proj.weight of `w` as the two 3-D tensors of
// the original bf16 checkpoints: <box>.gate_up_proj [E, 2I, D] (gate rows first), <box>.down_proj [E, D, I].
inline void write_fused_experts(const std::map<std::string, T>& w, const std::string& src, const std::string& box,
                                int64_t experts, int64_t inter, int64_t hidden, io::SafetensorsWriter& st) {
  std::vector<float> gate_up, down;
  for (int64_t e = 0; e < experts; ++e) {
    const std::string ep = fmt::format("{}.{}", src, e);
    for (const char* proj : {".gate_proj.weight", ".up_proj.weight"}) {
      const auto& v = w.at(ep + proj).v;
      gate_up.insert(gate_up.end(), v.begin(), v.end());
    }
    const auto& v = w.at(ep + ".down_proj.weight").v;
    down.insert(down.end(), v.begin(), v.end());
  }
  st.add(box + ".gate_up_proj", DType::F32, {experts, 2 * inter, hidden}, gate_up);
  st.add(box + ".down_proj", DType::F32, {experts, hidden, inter}, down);
}

// Flat layout, or the VL one: keys under text_config, tensors under model.language_model.,
// plus mtp.* and model.visual.* tensors that must be ignored. fused_experts: each MoE layer's
// experts as the two 3-D tensors of the original bf16 checkpoints.
inline void write_hybrid(const Hybrid& m, const std::filesystem::path& dir, bool vl = false, bool fused_experts = false) {
  std::filesystem::create_directories(dir);
  io::SafetensorsWriter st;
  auto has = [](const std::string& s, const std::string& t) { return s.find(t) != std::string::npos; };
  for (const auto& [name, t] : m.w) {
    if (m.next && has(name, ".linear_attn.in_proj_")) continue;  // packed below
    if (fused_experts && has(name, ".mlp.experts.")) continue;    // stacked below
    std::string n = name;
    if (const std::string l = fmt::format("model.layers.{}.", m.layers); m.mtp && n.rfind(l, 0) == 0)
      n = "mtp.layers.0." + n.substr(l.size());
    if (vl && n.rfind("model.", 0) == 0) n = "model.language_model." + n.substr(6);
    const std::string mod = name.substr(0, name.size() - 7);  // without ".weight"
    if (auto q = m.nvfp4.find(mod); q != m.nvfp4.end()) {
      const std::string b = n.substr(0, n.size() - 7);
      st.add(b + ".weight", DType::U8, {q->second.n, q->second.k / 2}, q->second.codes);
      st.add(b + ".weight_scale", DType::F8_E4M3, {q->second.n, q->second.k / 16}, q->second.scales);
      st.add(b + ".weight_scale_2", DType::F32, {}, &q->second.weight_scale_2, sizeof(float));
      if (const float s = m.nvfp4_input_scale.at(mod); s > 0) st.add(b + ".input_scale", DType::F32, {}, &s, sizeof s);
      continue;
    }
    st.add(n, DType::F32, t.shape, t.v);
  }
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    if (m.next && !m.full[l]) pack_qwen3_next(m, p + ".linear_attn", st);
    if (!fused_experts || m.is_dense(l)) continue;
    write_fused_experts(m.w, p + ".mlp.experts",
                        (vl ? fmt::format("model.language_model.layers.{}", l) : p) + ".mlp.experts", m.experts,
                        m.inter, m.hidden, st);
  }
  json c = m.config;
  if (vl) {
    std::vector<float> junk(16, 1.0f);
    if (!m.mtp) {  // to be ignored when the head is not asked for
      st.add("mtp.layers.0.mlp.gate.weight", DType::F32, {4, 4}, junk);
      st.add("mtp.fc.weight", DType::F32, {4, 4}, junk);
    }
    st.add("model.visual.blocks.0.attn.qkv.weight", DType::F32, {4, 4}, junk);
    json text = c;
    text.erase("architectures");
    text.erase("torch_dtype");
    const bool dense = m.family == Family::qwen3_5;
    c = {{"architectures", {dense ? "Qwen3_5ForConditionalGeneration" : "Qwen3_5MoeForConditionalGeneration"}},
         {"model_type", dense ? "qwen3_5" : "qwen3_5_moe"},
         {"text_config", text},
         {"vision_config", {{"depth", 1}, {"hidden_size", 4}}},
         {"torch_dtype", "float32"}};
  }
  st.write((dir / "model.safetensors").string());
  std::ofstream(dir / "config.json") << c.dump(2);
}

// ---- the float64 reference ----

// x as a quantized module sees it under `mode`: unchanged, rounded to bfloat16, or NVFP4
// quantize-dequantized with input_scale `scale` (the library's reference quantizer).
inline Vec seen_input(ExpertInput mode, float scale, const Vec& x) {
  if (mode == ExpertInput::exact) return x;
  std::vector<float> f(x.begin(), x.end());
  if (mode == ExpertInput::bf16) {
    for (float& v : f) v = bf16_to_f32(f32_to_bf16(v));
  } else {
    f = quant::qdq_activation(f.data(), 1, static_cast<int64_t>(f.size()), scale);
  }
  return Vec(f.begin(), f.end());
}

// W x in float64, W [n, k] as stored.
inline Vec dense_matvec(const T& w, const Vec& x) {
  const int64_t n = w.shape[0], k = w.shape[1];
  Vec y(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) y[r] += static_cast<double>(w.v[r * k + j]) * x[j];
  return y;
}

inline Vec matvec(const Hybrid& m, const std::string& name, const Vec& x0) {
  // Routed experts see their inputs as expert_input says (routed_expert); other NVFP4 modules
  // as linear_input says.
  const bool expert = name.find(".mlp.experts.") != std::string::npos;
  const bool transform = m.linear_input != ExpertInput::exact && !expert && m.nvfp4.count(name);
  const Vec x = transform ? seen_input(m.linear_input, m.nvfp4_input_scale.at(name), x0) : x0;
  return dense_matvec(m.w.at(name + ".weight"), x);
}
inline double sigm(double x) { return 1 / (1 + std::exp(-x)); }
inline double silu(double x) { return x * sigm(x); }
// x[0, n) ← x / rms(x) · (1 + w) (zero-centered), or · w when !zero_centered, or unscaled (w empty).
inline void rms_inplace(double* x, int64_t n, const std::vector<float>& w, double eps, bool zero_centered) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = 1 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * (w.empty() ? 1.0 : (zero_centered ? 1.0 : 0.0) + w[i]);
}
inline Vec swiglu(const Hybrid& m, const std::string& p, const Vec& x) {
  Vec g = matvec(m, p + ".gate_proj", x), u = matvec(m, p + ".up_proj", x);
  for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
  return matvec(m, p + ".down_proj", g);
}

// x as the experts of layer l see it (`which`: 0 the block input, 1 the SwiGLU product).
inline Vec expert_input(const Hybrid& m, int64_t l, int which, const Vec& x) {
  if (m.expert_input != ExpertInput::nvfp4) return seen_input(m.expert_input, 0.0f, x);
  const auto [s13, s2] = m.input_scale.at(l);
  return seen_input(ExpertInput::nvfp4, which == 0 ? s13 : s2, x);
}

// One routed expert of layer l.
inline Vec routed_expert(const Hybrid& m, int64_t l, int64_t e, const Vec& y) {
  const std::string p = fmt::format("model.layers.{}.mlp.experts.{}", l, e);
  const Vec x = expert_input(m, l, 0, y);
  Vec g = matvec(m, p + ".gate_proj", x), u = matvec(m, p + ".up_proj", x);
  for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
  return matvec(m, p + ".down_proj", expert_input(m, l, 1, g));
}

// A token's (t, h, w) rotary positions (images: model/layers/mrope_positions.h).
using Thw = std::array<int64_t, 3>;

// Which position frequency pair i rotates by: Qwen3.5's interleaved mrope_section as
// transformers' recomposition_frequencies writes it (t unless i % 3 picks h / w inside their sections).
inline int mrope_axis(const Hybrid& m, int64_t i) {
  if (!m.config.contains("rope_parameters") || !m.config["rope_parameters"].contains("mrope_section")) return 0;
  const auto sec = m.config["rope_parameters"]["mrope_section"].get<std::vector<int64_t>>();
  if (i % 3 == 1 && i < 3 * sec[1]) return 1;
  if (i % 3 == 2 && i < 3 * sec[2]) return 2;
  return 0;
}

// Decoder layer l (weights model.layers.<l>.*) over the residual stream h of positions 0..n-1
// (rotary positions `pos` per token when given, else t for token t).
inline void reference_layer(const Hybrid& m, int64_t l, std::vector<Vec>& h, const std::vector<Thw>* pos = nullptr) {
  const size_t n = h.size();
  const double eps = 1e-6;
  {
    const std::string p = fmt::format("model.layers.{}", l);
    std::vector<Vec> x(n);
    for (size_t t = 0; t < n; ++t) {
      x[t] = h[t];
      rms_inplace(x[t].data(), m.hidden, m.w.at(p + ".input_layernorm.weight").v, eps, true);
    }
    std::vector<Vec> mix(n);
    if (m.full[l]) {
      const std::string a = p + ".self_attn";
      std::vector<Vec> q(n), gate(n), k(n), v(n);
      for (size_t t = 0; t < n; ++t) {
        Vec qg = matvec(m, a + ".q_proj", x[t]);
        q[t].resize(m.heads * m.hd);
        gate[t].resize(m.heads * m.hd);
        for (int64_t hh = 0; hh < m.heads; ++hh)
          for (int64_t i = 0; i < m.hd; ++i) {
            q[t][hh * m.hd + i] = qg[hh * 2 * m.hd + i];
            gate[t][hh * m.hd + i] = qg[hh * 2 * m.hd + m.hd + i];
          }
        k[t] = matvec(m, a + ".k_proj", x[t]);
        v[t] = matvec(m, a + ".v_proj", x[t]);
        auto norm_rope = [&](Vec& z, int64_t nh, const std::string& nw) {
          for (int64_t hh = 0; hh < nh; ++hh) {
            double* hv = z.data() + hh * m.hd;
            rms_inplace(hv, m.hd, m.w.at(nw).v, eps, true);
            const int64_t half = m.rot / 2;  // NeoX rotate-half over the first rot dims only
            for (int64_t i = 0; i < half; ++i) {
              const double f = std::pow(1000.0, -2.0 * static_cast<double>(i) / static_cast<double>(m.rot));
              const int64_t tp = pos ? (*pos)[t][static_cast<size_t>(mrope_axis(m, i))] : static_cast<int64_t>(t);
              const double ang = static_cast<double>(tp) * f, c0 = hv[i], c1 = hv[i + half];
              hv[i] = c0 * std::cos(ang) - c1 * std::sin(ang);
              hv[i + half] = c1 * std::cos(ang) + c0 * std::sin(ang);
            }
          }
        };
        norm_rope(q[t], m.heads, a + ".q_norm.weight");
        norm_rope(k[t], m.kvh, a + ".k_norm.weight");
      }
      for (size_t t = 0; t < n; ++t) {
        Vec o(static_cast<size_t>(m.heads * m.hd), 0.0);
        for (int64_t hh = 0; hh < m.heads; ++hh) {
          const int64_t g = hh / (m.heads / m.kvh);
          Vec s(t + 1);
          for (size_t u = 0; u <= t; ++u) {
            double d = 0;
            for (int64_t i = 0; i < m.hd; ++i) d += q[t][hh * m.hd + i] * k[u][g * m.hd + i];
            s[u] = d / std::sqrt(static_cast<double>(m.hd));
          }
          const double mx = *std::max_element(s.begin(), s.end());
          double sum = 0;
          for (double& z : s) sum += z = std::exp(z - mx);
          for (size_t u = 0; u <= t; ++u)
            for (int64_t i = 0; i < m.hd; ++i) o[hh * m.hd + i] += s[u] / sum * v[u][g * m.hd + i];
        }
        for (size_t i = 0; i < o.size(); ++i) o[i] *= sigm(gate[t][i]);
        mix[t] = matvec(m, a + ".o_proj", o);
      }
    } else {
      const std::string a = p + ".linear_attn";
      const int64_t cd = 2 * m.nk * m.dk + m.nv * m.dv;
      std::vector<Vec> pre(n), conv(n, Vec(static_cast<size_t>(cd)));
      for (size_t t = 0; t < n; ++t) pre[t] = matvec(m, a + ".in_proj_qkv", x[t]);
      const auto& cw = m.w.at(a + ".conv1d.weight").v;
      // Conv1d(groups = channels, padding K-1), first n outputs: out[t] = Σ_j w[j]·x[t + j - (K-1)].
      for (size_t t = 0; t < n; ++t)
        for (int64_t c = 0; c < cd; ++c) {
          double acc = 0;
          for (int64_t j = 0; j < m.kconv; ++j) {
            const int64_t src = static_cast<int64_t>(t) + j - (m.kconv - 1);
            if (src >= 0) acc += cw[c * m.kconv + j] * pre[src][c];
          }
          conv[t][c] = silu(acc);
        }
      // S[j] is [dk][dv] per value head.
      std::vector<Vec> S(static_cast<size_t>(m.nv), Vec(static_cast<size_t>(m.dk * m.dv), 0.0));
      const auto& alog = m.w.at(a + ".A_log").v;
      const auto& dtb = m.w.at(a + ".dt_bias").v;
      for (size_t t = 0; t < n; ++t) {
        Vec bv = matvec(m, a + ".in_proj_b", x[t]), av = matvec(m, a + ".in_proj_a", x[t]);
        Vec z = matvec(m, a + ".in_proj_z", x[t]);
        auto l2 = [&](const double* src, double scale) {
          Vec r(src, src + m.dk);
          double ss = 0;
          for (double e : r) ss += e * e;
          for (double& e : r) e = e / std::sqrt(ss + 1e-6) * scale;
          return r;
        };
        Vec core(static_cast<size_t>(m.nv * m.dv));
        for (int64_t j = 0; j < m.nv; ++j) {
          const int64_t kh = j / (m.nv / m.nk);
          Vec q = l2(conv[t].data() + kh * m.dk, 1 / std::sqrt(static_cast<double>(m.dk)));
          Vec k = l2(conv[t].data() + m.nk * m.dk + kh * m.dk, 1.0);
          const double* v = conv[t].data() + 2 * m.nk * m.dk + j * m.dv;
          const double sp = std::log1p(std::exp(av[j] + dtb[j]));
          const double g = -std::exp(static_cast<double>(alog[j])) * sp, beta = sigm(bv[j]);
          Vec& s = S[j];
          for (double& e : s) e *= std::exp(g);
          for (int64_t c = 0; c < m.dv; ++c) {  // S += k ⊗ β(v − Sᵀk), column by column
            double stk = 0;
            for (int64_t i = 0; i < m.dk; ++i) stk += s[i * m.dv + c] * k[i];
            const double d = beta * (v[c] - stk);
            for (int64_t i = 0; i < m.dk; ++i) s[i * m.dv + c] += k[i] * d;
          }
          for (int64_t c = 0; c < m.dv; ++c) {
            double o = 0;
            for (int64_t i = 0; i < m.dk; ++i) o += s[i * m.dv + c] * q[i];
            core[j * m.dv + c] = o;
          }
          rms_inplace(core.data() + j * m.dv, m.dv, m.w.at(a + ".norm.weight").v, eps, false);
          for (int64_t c = 0; c < m.dv; ++c) core[j * m.dv + c] *= silu(z[j * m.dv + c]);
        }
        mix[t] = matvec(m, a + ".out_proj", core);
      }
    }
    for (size_t t = 0; t < n; ++t) {
      for (int64_t i = 0; i < m.hidden; ++i) h[t][i] += mix[t][i];
      Vec y = h[t];
      rms_inplace(y.data(), m.hidden, m.w.at(p + ".post_attention_layernorm.weight").v, eps, true);
      if (m.is_dense(l)) {
        Vec d = swiglu(m, p + ".mlp", y);
        for (int64_t i = 0; i < m.hidden; ++i) h[t][i] += d[i];
        continue;
      }
      Vec r = matvec(m, p + ".mlp.gate", y);
      double mx = *std::max_element(r.begin(), r.end()), sum = 0;
      for (double& e : r) sum += e = std::exp(e - mx);
      for (double& e : r) e /= sum;
      std::vector<int64_t> order(static_cast<size_t>(m.experts));
      for (int64_t e = 0; e < m.experts; ++e) order[e] = e;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return r[a] > r[b]; });
      double tot = 0;
      for (int64_t j = 0; j < m.top_k; ++j) tot += r[order[j]];
      if (!m.norm_topk) tot = 1;
      Vec out(static_cast<size_t>(m.hidden), 0.0);
      for (int64_t j = 0; j < m.top_k; ++j) {
        Vec eo = routed_expert(m, l, order[j], y);
        for (int64_t i = 0; i < m.hidden; ++i) out[i] += r[order[j]] / tot * eo[i];
      }
      Vec so = swiglu(m, p + ".mlp.shared_expert", y);
      const double sg = sigm(matvec(m, p + ".mlp.shared_expert_gate", y)[0]);
      for (int64_t i = 0; i < m.hidden; ++i) h[t][i] += out[i] + sg * so[i];
    }
  }
}

// The final normed hidden state of every position (what lm_head reads).
// With images: `embeds` maps a token index to the row that replaces its embedding (an image
// placeholder's encoder row), `pos` gives every token's (t, h, w) rotary positions.
inline std::vector<Vec> reference_hidden(const Hybrid& m, const std::vector<int32_t>& tok,
                                         const std::map<size_t, Vec>* embeds = nullptr,
                                         const std::vector<Thw>* pos = nullptr) {
  std::vector<Vec> h(tok.size());
  for (size_t t = 0; t < tok.size(); ++t) {
    const float* e = m.w.at("model.embed_tokens.weight").v.data() + tok[t] * m.hidden;
    h[t] = Vec(e, e + m.hidden);
    if (embeds && embeds->count(t)) h[t] = embeds->at(t);
  }
  for (int64_t l = 0; l < m.layers; ++l) reference_layer(m, l, h, pos);
  for (Vec& y : h) rms_inplace(y.data(), m.hidden, m.w.at("model.norm.weight").v, 1e-6, true);
  return h;
}

inline std::vector<Vec> reference(const Hybrid& m, const std::vector<int32_t>& tok,
                                  const std::map<size_t, Vec>* embeds = nullptr, const std::vector<Thw>* pos = nullptr) {
  std::vector<Vec> logits;
  for (const Vec& y : reference_hidden(m, tok, embeds, pos)) logits.push_back(matvec(m, "lm_head", y));
  return logits;
}

// ---- helpers ----
inline const std::vector<int32_t> kTokens = {1, 17, 5, 96, 40, 40, 3, 62, 11, 80, 29, 7, 50};

inline EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

}  // namespace fp4lm::model::hybrid_ref
