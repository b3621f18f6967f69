#pragma once
// The float64 forward of Gemma 3's text model written for the tests from transformers' published
// semantics (modeling_gemma3), not from the engine: embeddings × sqrt(hidden); per layer
// h += n2(attn(n1(h))), h += n4(mlp(n3(h))) with every RMSNorm x/rms·(1 + w); q/k norms before
// RoPE (rotate-half; sliding layers with their own base, full layers with rope_theta and a linear
// factor); scores scaled by query_pre_attn_scalar^-0.5, a sliding layer seeing the last
// `window` positions (its own included); GELU(tanh) gated MLP; final norm, tied or separate
// lm_head, optional soft-capping. Attention is recomputed per position over the whole sequence.
// Plus the tiny random models it runs on and their checkpoint writer (flat or VL layout,
// modules stored as NVFP4 where asked).
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/log_capture.h"
#include "common/paths.h"
#include "io/safetensors.h"
#include "reference/hybrid_reference.h"
#include "reference/logits_check.h"
#include "quant/nvfp4.h"

namespace fp4lm::model::gemma_ref {

using nlohmann::json;
using Vec = std::vector<double>;
using hybrid_ref::ExpertInput;
using hybrid_ref::T;
using hybrid_ref::f32;
using hybrid_ref::quantize_module;

struct Gemma {
  json config;  // the text model's config.json (flat layout)
  std::map<std::string, T> w;
  int64_t vocab = 97, hidden = 32, layers = 4, heads = 4, kvh = 2, hd = 16, inter = 48, window = 4;
  std::vector<bool> sliding = {true, false, true, false};
  double qpas = 24, theta_full = 1000.0, theta_local = 50.0, rope_factor = 2.0, softcap = 0;
  bool tied = true;
  // Gemma 4: RMSNorm x/rms·w (not 1 + w), values RMS-normalized per head without a weight,
  // softmax scale 1 (qpas 1), the full layers' own head_dim / KV heads, keys as values there
  // (no v_proj), proportional RoPE there (the first prf·head_dim/2 pairs rotate), each layer's
  // output × layer_scalar.
  bool g4 = false, k_eq_v = false;
  int64_t full_hd = 16, full_kvh = 2;
  double prf = 1.0;
  std::vector<double> layer_scalar;
  // Gemma 4 MoE (enable_moe_block): every layer's router + experts beside the dense MLP.
  bool moe = false;
  int64_t experts = 0, top_k = 0, moe_inter = 0;
  // Gemma 4's small models: per layer the earlier layer whose K/V it reads (-1: its own; empty:
  // all their own), and per-layer input embeddings of `ple` values per layer (0: none).
  std::vector<int64_t> kv_src;
  int64_t ple = 0;
  int64_t layer_hd(int64_t l) const { return g4 && !sliding[static_cast<size_t>(l)] ? full_hd : hd; }
  int64_t layer_kvh(int64_t l) const { return g4 && !sliding[static_cast<size_t>(l)] ? full_kvh : kvh; }
  // How modules stored as NVFP4 see their inputs (nvfp4: with their input_scale).
  ExpertInput linear_input = ExpertInput::exact;
  std::map<std::string, quant::Nvfp4Weight> nvfp4;
  std::map<std::string, float> nvfp4_input_scale;
};

// Every MLP projection of every layer as NVFP4 (NVIDIA's Gemma recipe: attention stays BF16),
// and every expert's (routers stay BF16): gate / up with `input_scale`, down with `down_scale`
// (0: input_scale).
inline void quantize_mlps(Gemma& m, float input_scale = 0.0f, float down_scale = 0.0f) {
  if (down_scale == 0.0f) down_scale = input_scale;
  auto one = [&](const std::string& mod, const char* proj) {
    quantize_module(m, mod + "." + proj, std::string(proj) == "down_proj" ? down_scale : input_scale);
  };
  for (int64_t l = 0; l < m.layers; ++l)
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      one(fmt::format("model.layers.{}.mlp", l), proj);
      for (int64_t e = 0; m.moe && e < m.experts; ++e) one(fmt::format("model.layers.{}.experts.{}", l, e), proj);
    }
}

// Layers sliding, full, sliding, full (layer_types given), window 4, head_dim 16 with
// query_pre_attn_scalar 24 (≠ head_dim, as the 27B's 168 vs 128), linear RoPE factor 2 on the
// full layers (as the 4B/12B/27B's 8), transformers 5's rope_parameters form.
inline Gemma make_gemma3(uint64_t seed = 5) {
  Gemma m;
  json types = json::array();
  for (bool s : m.sliding) types.push_back(s ? "sliding_attention" : "full_attention");
  m.config = {{"architectures", {"Gemma3ForCausalLM"}},
              {"model_type", "gemma3_text"},
              {"vocab_size", m.vocab},
              {"hidden_size", m.hidden},
              {"intermediate_size", m.inter},
              {"num_hidden_layers", m.layers},
              {"num_attention_heads", m.heads},
              {"num_key_value_heads", m.kvh},
              {"head_dim", m.hd},
              {"hidden_activation", "gelu_pytorch_tanh"},
              {"max_position_embeddings", 256},
              {"rms_norm_eps", 1e-6},
              {"query_pre_attn_scalar", m.qpas},
              {"sliding_window", m.window},
              {"layer_types", types},
              {"rope_parameters",
               {{"full_attention", {{"rope_type", "linear"}, {"factor", m.rope_factor}, {"rope_theta", m.theta_full}}},
                {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", m.theta_local}}}}},
              {"final_logit_softcapping", nullptr},
              {"attn_logit_softcapping", nullptr},
              {"tie_word_embeddings", m.tied},
              {"bos_token_id", 2},
              {"eos_token_id", 1},
              {"torch_dtype", "float32"}};
  hybrid_ref::RandomWeights rw{m.w, std::mt19937_64(seed)};
  auto add = [&](const std::string& name, Shape shape, float sd, float mean = 0.0f) { rw.add(name, shape, sd, mean); };
  auto lin = [&](const std::string& name, int64_t n, int64_t k) { rw.lin(name, n, k); };
  add("model.embed_tokens.weight", {m.vocab, m.hidden}, 0.2f);
  add("model.norm.weight", {m.hidden}, 0.1f);
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      add(p + "." + n + ".weight", {m.hidden}, 0.1f);
    lin(p + ".self_attn.q_proj", m.heads * m.hd, m.hidden);
    lin(p + ".self_attn.k_proj", m.kvh * m.hd, m.hidden);
    lin(p + ".self_attn.v_proj", m.kvh * m.hd, m.hidden);
    lin(p + ".self_attn.o_proj", m.hidden, m.heads * m.hd);
    add(p + ".self_attn.q_norm.weight", {m.hd}, 0.1f);
    add(p + ".self_attn.k_norm.weight", {m.hd}, 0.1f);
    lin(p + ".mlp.gate_proj", m.inter, m.hidden);
    lin(p + ".mlp.up_proj", m.inter, m.hidden);
    lin(p + ".mlp.down_proj", m.hidden, m.inter);
  }
  return m;
}

// Gemma 4 dense as the 31B: sliding, full, sliding, full; the full layers head_dim 32 with one KV
// head and attention_k_eq_v, proportional RoPE (partial_rotary_factor 0.25) with theta 1000;
// sliding layers head_dim 16, 2 KV heads, window 4, theta 50; layer scalars ≠ 1; soft-capping.
// `shape` may change the dimensions (layers and their types, heads, head dims, window) before
// the config and weights are made.
inline Gemma make_gemma4(uint64_t seed = 6, const std::function<void(Gemma&)>& shape = {}) {
  Gemma m;
  m.g4 = true;
  m.k_eq_v = true;
  m.full_hd = 32;
  m.full_kvh = 1;
  m.prf = 0.25;
  m.qpas = 1.0;
  m.rope_factor = 1.0;
  m.softcap = 3.0;
  if (shape) shape(m);
  json types = json::array();
  for (bool sl : m.sliding) types.push_back(sl ? "sliding_attention" : "full_attention");
  m.config = {{"architectures", {"Gemma4ForCausalLM"}},
              {"model_type", "gemma4_text"},
              {"vocab_size", m.vocab},
              {"hidden_size", m.hidden},
              {"intermediate_size", m.inter},
              {"num_hidden_layers", m.layers},
              {"num_attention_heads", m.heads},
              {"num_key_value_heads", m.kvh},
              {"head_dim", m.hd},
              {"global_head_dim", m.full_hd},
              {"num_global_key_value_heads", m.full_kvh},
              {"attention_k_eq_v", true},
              {"hidden_activation", "gelu_pytorch_tanh"},
              {"max_position_embeddings", 256},
              {"rms_norm_eps", 1e-6},
              {"sliding_window", m.window},
              {"layer_types", types},
              {"rope_parameters",
               {{"full_attention", {{"rope_type", "proportional"}, {"partial_rotary_factor", m.prf}, {"rope_theta", m.theta_full}}},
                {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", m.theta_local}}}}},
              {"final_logit_softcapping", m.softcap},
              {"hidden_size_per_layer_input", 0},
              {"num_kv_shared_layers", 0},
              {"enable_moe_block", false},
              {"use_double_wide_mlp", false},
              {"tie_word_embeddings", true},
              {"bos_token_id", 2},
              {"eos_token_id", 1},
              {"torch_dtype", "float32"}};
  hybrid_ref::RandomWeights rw{m.w, std::mt19937_64(seed)};
  auto add = [&](const std::string& name, Shape shape, float sd, float mean = 0.0f) { rw.add(name, shape, sd, mean); };
  auto lin = [&](const std::string& name, int64_t n, int64_t k) { rw.lin(name, n, k); };
  add("model.embed_tokens.weight", {m.vocab, m.hidden}, 0.2f);
  add("model.norm.weight", {m.hidden}, 0.1f, 1.0f);
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    const int64_t hd = m.layer_hd(l), kvh = m.layer_kvh(l);
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                          "post_feedforward_layernorm"})
      add(p + "." + n + ".weight", {m.hidden}, 0.1f, 1.0f);
    lin(p + ".self_attn.q_proj", m.heads * hd, m.hidden);
    lin(p + ".self_attn.k_proj", kvh * hd, m.hidden);
    if (m.sliding[static_cast<size_t>(l)] || !m.k_eq_v) lin(p + ".self_attn.v_proj", kvh * hd, m.hidden);
    lin(p + ".self_attn.o_proj", m.hidden, m.heads * hd);
    add(p + ".self_attn.q_norm.weight", {hd}, 0.1f, 1.0f);
    add(p + ".self_attn.k_norm.weight", {hd}, 0.1f, 1.0f);
    lin(p + ".mlp.gate_proj", m.inter, m.hidden);
    lin(p + ".mlp.up_proj", m.inter, m.hidden);
    lin(p + ".mlp.down_proj", m.hidden, m.inter);
    const float scalar = 0.6f + 0.25f * static_cast<float>(l);
    m.layer_scalar.push_back(scalar);
    m.w[p + ".layer_scalar"] = T{{1}, {scalar}};
  }
  return m;
}

// Gemma 4 MoE as the 26B-A4B: make_gemma4's model plus, in every layer, a router (proj, scale,
// per_expert_scale ≠ 1), `experts` experts of moe_inter with top_k chosen, and the three extra
// norms.
inline Gemma make_gemma4_moe(uint64_t seed = 7, int64_t experts = 6, int64_t top_k = 2, int64_t moe_inter = 32,
                             const std::function<void(Gemma&)>& shape = {}) {
  Gemma m = make_gemma4(seed, shape);
  m.moe = true;
  m.experts = experts;
  m.top_k = top_k;
  m.moe_inter = moe_inter;
  m.config["enable_moe_block"] = true;
  m.config["num_experts"] = experts;
  m.config["top_k_experts"] = top_k;
  m.config["moe_intermediate_size"] = moe_inter;
  hybrid_ref::RandomWeights rw{m.w, std::mt19937_64(seed + 100)};
  auto add = [&](const std::string& name, Shape shape, float sd, float mean = 0.0f) { rw.add(name, shape, sd, mean); };
  auto lin = [&](const std::string& name, int64_t n, int64_t k) { rw.lin(name, n, k); };
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    for (const char* n : {"post_feedforward_layernorm_1", "pre_feedforward_layernorm_2", "post_feedforward_layernorm_2"})
      add(p + "." + n + ".weight", {m.hidden}, 0.1f, 1.0f);
    // Router logits spread enough that the top-k are not near ties.
    add(p + ".router.proj.weight", {experts, m.hidden}, 3.0f / std::sqrt(static_cast<float>(m.hidden)));
    add(p + ".router.scale", {m.hidden}, 0.2f, 1.0f);
    add(p + ".router.per_expert_scale", {experts}, 0.3f, 1.0f);
    for (int64_t e = 0; e < experts; ++e) {
      const std::string ep = fmt::format("{}.experts.{}", p, e);
      lin(ep + ".gate_proj", moe_inter, m.hidden);
      lin(ep + ".up_proj", moe_inter, m.hidden);
      lin(ep + ".down_proj", m.hidden, moe_inter);
    }
  }
  return m;
}

// Gemma 4 as its small models (E2B / E4B) are built, which NVIDIA does not publish in NVFP4:
// layers sliding, full, sliding, sliding, full; the last two read the K/V of layers 2 and 1
// (num_kv_shared_layers 2: no k_proj / v_proj / k_norm of their own) and have MLPs twice as wide
// (use_double_wide_mlp); per-layer input embeddings of 16 values per layer.
inline Gemma make_gemma4_small(uint64_t seed = 8) {
  Gemma m = make_gemma4(seed, [](Gemma& g) {
    g.layers = 5;
    g.sliding = {true, false, true, true, false};
  });
  m.kv_src = {-1, -1, -1, 2, 1};
  m.ple = 16;
  m.config["num_kv_shared_layers"] = 2;
  m.config["use_double_wide_mlp"] = true;
  m.config["hidden_size_per_layer_input"] = m.ple;
  m.config["vocab_size_per_layer_input"] = m.vocab;
  hybrid_ref::RandomWeights rw{m.w, std::mt19937_64(seed + 200)};
  auto add = [&](const std::string& name, Shape shape, float sd, float mean = 0.0f) { rw.add(name, shape, sd, mean); };
  auto lin = [&](const std::string& name, int64_t n, int64_t k) { rw.lin(name, n, k); };
  add("model.embed_tokens_per_layer.weight", {m.vocab, m.layers * m.ple}, 0.2f);
  lin("model.per_layer_model_projection", m.layers * m.ple, m.hidden);
  add("model.per_layer_projection_norm.weight", {m.ple}, 0.1f, 1.0f);
  for (int64_t l = 0; l < m.layers; ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    lin(p + ".per_layer_input_gate", m.ple, m.hidden);
    lin(p + ".per_layer_projection", m.hidden, m.ple);
    add(p + ".post_per_layer_input_norm.weight", {m.hidden}, 0.1f, 1.0f);
    if (m.kv_src[static_cast<size_t>(l)] < 0) continue;
    for (const char* t : {".self_attn.k_proj.weight", ".self_attn.v_proj.weight", ".self_attn.k_norm.weight"})
      m.w.erase(p + t);
    lin(p + ".mlp.gate_proj", 2 * m.inter, m.hidden);
    lin(p + ".mlp.up_proj", 2 * m.inter, m.hidden);
    lin(p + ".mlp.down_proj", m.hidden, 2 * m.inter);
  }
  return m;
}

// Sets tie_word_embeddings false and adds a random lm_head.
inline void untie(Gemma& m, uint64_t seed = 3) {
  m.tied = false;
  m.config["tie_word_embeddings"] = false;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(static_cast<float>(m.hidden)));
  T t{{m.vocab, m.hidden}, std::vector<float>(static_cast<size_t>(m.vocab * m.hidden))};
  for (float& x : t.v) x = d(rng);
  m.w["lm_head.weight"] = std::move(t);
}

// Flat layout, or the VL one (Gemma3ForConditionalGeneration: keys under text_config, tensors
// under model.language_model., plus vision tower / projector tensors that must be ignored).
// fused_experts: the MoE experts as transformers and Google store them (experts.gate_up_proj
// [E, 2I, D], experts.down_proj [E, D, I]); else per expert, as NVIDIA's NVFP4 export.
inline void write_gemma(const Gemma& m, const std::filesystem::path& dir, bool vl = false, bool fused_experts = false) {
  std::filesystem::create_directories(dir);
  io::SafetensorsWriter st;
  const std::string lm = vl ? "model.language_model." : "model.";
  for (int64_t l = 0; fused_experts && l < m.layers; ++l)
    hybrid_ref::write_fused_experts(m.w, fmt::format("model.layers.{}.experts", l),
                                    fmt::format("{}layers.{}.experts", lm, l), m.experts, m.moe_inter, m.hidden, st);
  for (const auto& [name, t] : m.w) {
    if (fused_experts && name.find(".experts.") != std::string::npos) continue;
    std::string n = name;
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
  json c = m.config;
  if (vl) {
    std::vector<float> junk(16, 1.0f);
    st.add("model.vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight", DType::F32, {4, 4}, junk);
    st.add("model.multi_modal_projector.mm_input_projection_weight", DType::F32, {4, 4}, junk);
    json text = c;
    text.erase("architectures");
    text.erase("torch_dtype");
    if (m.g4) {
      st.add("model.audio_tower.layers.0.feed_forward1.ffw_layer_1.linear.weight", DType::F32, {4, 4}, junk);
      st.add("model.embed_vision.embedding_projection.weight", DType::F32, {4, 4}, junk);
      st.add("model.embed_audio.embedding_projection.weight", DType::F32, {4, 4}, junk);
    }
    c = {{"architectures", {m.g4 ? "Gemma4ForConditionalGeneration" : "Gemma3ForConditionalGeneration"}},
         {"model_type", m.g4 ? "gemma4" : "gemma3"},
         {"text_config", text},
         {"vision_config", {{"model_type", "siglip_vision_model"}, {"hidden_size", 4}}},
         {"mm_tokens_per_image", 256},
         {"image_token_index", 262144},
         {"torch_dtype", "float32"}};
  }
  st.write((dir / "model.safetensors").string());
  std::ofstream(dir / "config.json") << c.dump(2);
}

// ---- the float64 reference ----

inline Vec matvec(const Gemma& m, const std::string& name, const Vec& x0) {
  const bool transform = m.linear_input != ExpertInput::exact && m.nvfp4.count(name);
  const Vec x = transform ? hybrid_ref::seen_input(m.linear_input, m.nvfp4_input_scale.at(name), x0) : x0;
  return hybrid_ref::dense_matvec(m.w.at(name + ".weight"), x);
}

// x[0, n) ← x / sqrt(mean(x²) + eps) · (1 + w), or · w (Gemma 4: `plain`), or unscaled (w empty).
inline void gemma_rms(double* x, int64_t n, const std::vector<float>& w, bool plain = false) {
  hybrid_ref::rms_inplace(x, n, w, 1e-6, !plain);
}

inline double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}

// Gemma 4's MoE branch of layer l on the residual stream h (transformers' Gemma4TextRouter and
// Gemma4TextExperts): router on rms(h) · scale / sqrt(hidden), softmax, top-k (ties: lower id),
// renormalized, × per_expert_scale; GELU-tanh experts on pre_feedforward_layernorm_2(h);
// post_feedforward_layernorm_2 of their weighted sum.
inline Vec moe_branch(const Gemma& m, int64_t l, const Vec& h) {
  const std::string p = fmt::format("model.layers.{}", l);
  Vec r = h;
  gemma_rms(r.data(), m.hidden, {}, true);
  const std::vector<float>& scale = m.w.at(p + ".router.scale").v;
  for (int64_t i = 0; i < m.hidden; ++i) r[i] *= scale[i] / std::sqrt(static_cast<double>(m.hidden));
  Vec prob = matvec(m, p + ".router.proj", r);
  const double mx = *std::max_element(prob.begin(), prob.end());
  double sum = 0;
  for (double& z : prob) sum += z = std::exp(z - mx);
  for (double& z : prob) z /= sum;
  std::vector<int64_t> order(prob.size());
  for (size_t e = 0; e < order.size(); ++e) order[e] = static_cast<int64_t>(e);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return prob[a] > prob[b]; });
  double chosen = 0;
  for (int64_t j = 0; j < m.top_k; ++j) chosen += prob[order[j]];
  Vec x = h;
  gemma_rms(x.data(), m.hidden, m.w.at(p + ".pre_feedforward_layernorm_2.weight").v, true);
  Vec out(static_cast<size_t>(m.hidden), 0.0);
  for (int64_t j = 0; j < m.top_k; ++j) {
    const int64_t e = order[j];
    const double w = prob[e] / chosen * m.w.at(p + ".router.per_expert_scale").v[e];
    const std::string ep = fmt::format("{}.experts.{}", p, e);
    const Vec g = matvec(m, ep + ".gate_proj", x), u = matvec(m, ep + ".up_proj", x);
    Vec gu(g.size());
    for (size_t i = 0; i < g.size(); ++i) gu[i] = gelu_tanh(g[i]) * u[i];
    const Vec d = matvec(m, ep + ".down_proj", gu);
    for (int64_t i = 0; i < m.hidden; ++i) out[i] += w * d[i];
  }
  gemma_rms(out.data(), m.hidden, m.w.at(p + ".post_feedforward_layernorm_2.weight").v, true);
  return out;
}

// Logits [n, vocab] of the token sequence, every position.
inline std::vector<Vec> reference(const Gemma& m, const std::vector<int32_t>& tok) {
  const size_t n = tok.size();
  const std::vector<float>& emb = m.w.at("model.embed_tokens.weight").v;
  std::vector<Vec> h(n);
  for (size_t t = 0; t < n; ++t) {
    h[t] = Vec(emb.begin() + tok[t] * m.hidden, emb.begin() + (tok[t] + 1) * m.hidden);
    for (double& v : h[t]) v *= std::sqrt(static_cast<double>(m.hidden));
  }
  // Per-layer inputs [L·P] per token (transformers' get_per_layer_inputs + project_per_layer_inputs).
  std::vector<Vec> ple_in(n);
  for (size_t t = 0; m.ple > 0 && t < n; ++t) {
    const int64_t w = m.layers * m.ple;
    const std::vector<float>& tab = m.w.at("model.embed_tokens_per_layer.weight").v;
    Vec proj = matvec(m, "model.per_layer_model_projection", h[t]);
    for (int64_t l = 0; l < m.layers; ++l) {
      double* pl = proj.data() + l * m.ple;
      for (int64_t i = 0; i < m.ple; ++i) pl[i] /= std::sqrt(static_cast<double>(m.hidden));
      gemma_rms(pl, m.ple, m.w.at("model.per_layer_projection_norm.weight").v, true);
    }
    ple_in[t].resize(static_cast<size_t>(w));
    for (int64_t i = 0; i < w; ++i)
      ple_in[t][i] = (proj[i] + tab[tok[t] * w + i] * std::sqrt(static_cast<double>(m.ple))) * std::sqrt(0.5);
  }
  std::vector<std::vector<Vec>> layer_k(static_cast<size_t>(m.layers)), layer_v(layer_k.size());
  for (int64_t l = 0; l < m.layers; ++l) {
    const int64_t src = m.kv_src.empty() ? -1 : m.kv_src[static_cast<size_t>(l)];
    const std::string p = fmt::format("model.layers.{}", l), a = p + ".self_attn";
    const bool sliding = m.sliding[static_cast<size_t>(l)];
    const double theta = sliding ? m.theta_local : m.theta_full, factor = sliding ? 1.0 : m.rope_factor;
    const int64_t hd = m.layer_hd(l), kvh = m.layer_kvh(l);
    const bool g4 = m.g4;
    // Proportional RoPE (Gemma 4's full layers): only the first `rotated` pairs turn.
    const int64_t rotated = g4 && !sliding ? static_cast<int64_t>(std::floor(m.prf * static_cast<double>(hd) / 2)) : hd / 2;
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      Vec x = h[t];
      gemma_rms(x.data(), m.hidden, m.w.at(p + ".input_layernorm.weight").v, g4);
      q[t] = matvec(m, a + ".q_proj", x);
      if (src < 0) {
        k[t] = matvec(m, a + ".k_proj", x);
        v[t] = m.w.count(a + ".v_proj.weight") ? matvec(m, a + ".v_proj", x) : k[t];
        if (g4)
          for (int64_t hh = 0; hh < kvh; ++hh) gemma_rms(v[t].data() + hh * hd, hd, {});
      }
      auto norm_rope = [&](Vec& z, int64_t nh, const std::string& nw) {
        for (int64_t hh = 0; hh < nh; ++hh) {
          double* hv = z.data() + hh * hd;
          gemma_rms(hv, hd, m.w.at(nw).v, g4);
          const int64_t half = hd / 2;
          for (int64_t i = 0; i < rotated; ++i) {
            const double f = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
            const double ang = static_cast<double>(t) / factor * f, c0 = hv[i], c1 = hv[i + half];
            hv[i] = c0 * std::cos(ang) - c1 * std::sin(ang);
            hv[i + half] = c1 * std::cos(ang) + c0 * std::sin(ang);
          }
        }
      };
      norm_rope(q[t], m.heads, a + ".q_norm.weight");
      if (src < 0) norm_rope(k[t], kvh, a + ".k_norm.weight");
    }
    if (src >= 0) {  // K/V shared: the earlier layer's, as it stored them
      k = layer_k[static_cast<size_t>(src)];
      v = layer_v[static_cast<size_t>(src)];
    }
    layer_k[static_cast<size_t>(l)] = k;
    layer_v[static_cast<size_t>(l)] = v;
    for (size_t t = 0; t < n; ++t) {
      const size_t lo = sliding && t + 1 > static_cast<size_t>(m.window) ? t + 1 - static_cast<size_t>(m.window) : 0;
      Vec o(static_cast<size_t>(m.heads * hd), 0.0);
      for (int64_t hh = 0; hh < m.heads; ++hh) {
        const int64_t g = hh / (m.heads / kvh);
        Vec s(t + 1 - lo);
        for (size_t u = lo; u <= t; ++u) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[t][hh * hd + i] * k[u][g * hd + i];
          s[u - lo] = d / std::sqrt(m.qpas);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& z : s) sum += z = std::exp(z - mx);
        for (size_t u = lo; u <= t; ++u)
          for (int64_t i = 0; i < hd; ++i) o[hh * hd + i] += s[u - lo] / sum * v[u][g * hd + i];
      }
      Vec y = matvec(m, a + ".o_proj", o);
      gemma_rms(y.data(), m.hidden, m.w.at(p + ".post_attention_layernorm.weight").v, g4);
      for (int64_t i = 0; i < m.hidden; ++i) h[t][i] += y[i];
    }
    for (size_t t = 0; t < n; ++t) {
      Vec x = h[t];
      gemma_rms(x.data(), m.hidden, m.w.at(p + ".pre_feedforward_layernorm.weight").v, g4);
      const Vec g = matvec(m, p + ".mlp.gate_proj", x), u = matvec(m, p + ".mlp.up_proj", x);
      Vec gu(g.size());
      for (size_t i = 0; i < g.size(); ++i) gu[i] = gelu_tanh(g[i]) * u[i];
      Vec y = matvec(m, p + ".mlp.down_proj", gu);
      if (m.moe) {
        gemma_rms(y.data(), m.hidden, m.w.at(p + ".post_feedforward_layernorm_1.weight").v, true);
        const Vec e = moe_branch(m, l, h[t]);
        for (int64_t i = 0; i < m.hidden; ++i) y[i] += e[i];
      }
      gemma_rms(y.data(), m.hidden, m.w.at(p + ".post_feedforward_layernorm.weight").v, g4);
      for (int64_t i = 0; i < m.hidden; ++i) h[t][i] += y[i];
      if (m.ple > 0) {  // the per-layer input's residual term
        Vec g = matvec(m, p + ".per_layer_input_gate", h[t]);
        for (int64_t i = 0; i < m.ple; ++i) g[i] = gelu_tanh(g[i]) * ple_in[t][l * m.ple + i];
        Vec z = matvec(m, p + ".per_layer_projection", g);
        gemma_rms(z.data(), m.hidden, m.w.at(p + ".post_per_layer_input_norm.weight").v, true);
        for (int64_t i = 0; i < m.hidden; ++i) h[t][i] += z[i];
      }
      if (g4)
        for (double& z : h[t]) z *= m.layer_scalar[static_cast<size_t>(l)];
    }
  }
  std::vector<Vec> logits(n);
  for (size_t t = 0; t < n; ++t) {
    Vec x = h[t];
    gemma_rms(x.data(), m.hidden, m.w.at("model.norm.weight").v, m.g4);
    const T& head = m.w.at(m.tied ? "model.embed_tokens.weight" : "lm_head.weight");
    logits[t].assign(static_cast<size_t>(m.vocab), 0.0);
    for (int64_t r = 0; r < m.vocab; ++r) {
      double d = 0;
      for (int64_t i = 0; i < m.hidden; ++i) d += static_cast<double>(head.v[r * m.hidden + i]) * x[i];
      logits[t][r] = m.softcap > 0 ? m.softcap * std::tanh(d / m.softcap) : d;
    }
  }
  return logits;
}

inline const std::vector<int32_t> kTokens = {2, 17, 5, 96, 40, 40, 3, 62, 11, 80, 29, 7, 50};

// Bfloat16 activations against the float64 reference, position by position: every position within
// `tol` of the logit range except at most `flips` (where bf16's rounding changed a router's top-k
// choice: a discrete jump, as in tests/model/qwen3_5_moe_test.cpp). Returns the worst close one.
inline double expect_bf16_positions_close(const std::vector<float>& got, const std::vector<Vec>& want, int64_t vocab,
                                          double tol, int flips = 0) {
  int far = 0;
  double worst = 0;
  std::string where;
  for (size_t t = 0; t < want.size(); ++t) {
    const std::vector<float> row(got.begin() + static_cast<long>(t) * vocab,
                                 got.begin() + static_cast<long>(t + 1) * vocab);
    const double d = max_rel_diff(row, {want[t]});
    EXPECT_GT(d, 1e-5) << "position " << t;  // bf16 is in effect
    if (d < tol) worst = std::max(worst, d);
    else ++far, where += fmt::format(" {}:{:.3f}", t, d);
  }
  EXPECT_LE(far, flips) << "positions beyond " << tol << ":" << where;
  return worst;
}

// The model in `dir`, and the INFO lines its load logged (the oracle's choices, what was skipped).
inline std::unique_ptr<CausalLM> load_logged(const std::string& dir, const EngineOptions& o, std::string& log) {
  test::LogCapture cap(spdlog::level::info);
  std::unique_ptr<CausalLM> lm = CausalLM::load(dir, o);
  log = cap.text();
  return lm;
}

// Greedy generation of `steps` tokens after the first 5 of kTokens, token by token: at every
// step the engine's choice is the reference's argmax over the same growing sequence.
inline void expect_greedy_generation_matches_reference(const CausalLM& lm, const Gemma& ref, int steps = 6) {
  std::vector<int32_t> toks(kTokens.begin(), kTokens.begin() + 5);
  const size_t prompt = toks.size();
  SequenceState s = lm.new_sequence();
  std::vector<float> last(static_cast<size_t>(lm.vocab_size()));
  lm.forward(s, toks.data(), static_cast<int64_t>(toks.size()), LogitsMode::last, last.data());
  for (int i = 0; i < steps; ++i) {
    toks.push_back(static_cast<int32_t>(std::max_element(last.begin(), last.end()) - last.begin()));
    if (i + 1 < steps) lm.forward(s, &toks.back(), 1, LogitsMode::last, last.data());
  }
  for (size_t t = prompt; t < toks.size(); ++t) {
    const auto r = reference(ref, std::vector<int32_t>(toks.begin(), toks.begin() + static_cast<long>(t)));
    EXPECT_EQ(toks[t], std::max_element(r.back().begin(), r.back().end()) - r.back().begin()) << t;
  }
}


// A published-layout replica (MLPs / experts NVFP4) loaded as stored or under
// `--override-activation-dtype bfloat16`, against the float64 reference with the matching
// activations: as stored the engine computes the NVFP4 math exactly (float32 rounding); the
// override runs every activation at bfloat16, not only the MLPs' inputs. As stored, greedy
// generation follows the reference too.
inline void expect_replica_matches_reference(const CausalLM& lm, const Gemma& m, bool override_a16) {
  Gemma ref = m;
  ref.linear_input = override_a16 ? ExpertInput::bf16 : ExpertInput::nvfp4;
  const double e = max_rel_diff(all_logits(lm, kTokens), reference(ref, kTokens));
  EXPECT_LT(e, override_a16 ? 4e-2 : 2e-5);
  ::testing::Test::RecordProperty(override_a16 ? "override_bf16_max_rel_diff" : "w4a4_max_rel_diff",
                                  fmt::format("{:.2e}", e));
  if (!override_a16) expect_greedy_generation_matches_reference(lm, ref);
}

// The model loaded with bfloat16 activations, position by position against the float64
// reference (expect_bf16_positions_close); records the worst close position.
inline void expect_bf16_load_close_to_reference(const Gemma& m, int flips) {
  test::TempDir dir;
  write_gemma(m, dir.path());
  EngineOptions o;
  o.dtype = "bfloat16";
  const double d = expect_bf16_positions_close(all_logits(*CausalLM::load(dir.path().string(), o), kTokens),
                                               reference(m, kTokens), m.vocab, 0.1, flips);
  ::testing::Test::RecordProperty("bf16_worst_close_position", fmt::format("{:.2e}", d));
}

}  // namespace fp4lm::model::gemma_ref
