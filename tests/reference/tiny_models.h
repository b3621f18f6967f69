#pragma once
// Small random checkpoints of every supported architecture (float32 weights, non-trivial norms
// and biases, each architecture's config quirks), and a plain float64 re-implementation of the
// HF forward pass to check the engine against: full recomputation per sequence, attention as a
// naive loop over positions, MoE as a per-token loop over the chosen experts, RoPE from the
// formula. Header-only so tests/engine can use it too.
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

#include "io/safetensors.h"

namespace fp4lm::test {

struct TinyTensor {
  Shape shape;
  std::vector<float> v;
};
using TinyWeights = std::map<std::string, TinyTensor>;

struct TinyModel {
  nlohmann::json config;
  TinyWeights w;
};

// One small model of `arch`. Quirks exercised: Llama — GQA, llama3 rope_scaling (or linear when
// `linear_rope`), tied embeddings; Qwen2 — q/k/v bias; Qwen3 — q_norm/k_norm, head_dim != hidden/heads;
// Qwen3-MoE — mlp_only_layers (layer 1 dense), norm_topk_prob; Mixtral — block_sparse_moe w1/w3/w2;
// Qwen2-MoE — shared expert + gate, decoder_sparse_step 2 (layer 0 dense), no renormalization;
// Mistral — head_dim != hidden/heads, a sliding_window no sequence reaches.
inline TinyModel make_tiny_model(const std::string& arch, uint64_t seed = 7, bool linear_rope = false,
                                 int64_t vocab = 97) {
  using nlohmann::json;
  const int64_t hidden = 32, layers = 3, heads = 4, kv = 2;
  const int64_t head_dim = arch == "Qwen3ForCausalLM" || arch == "MistralForCausalLM" ? 16 : hidden / heads;
  const int64_t inter = 48, experts = 6, top_k = 2, moe_inter = 16, shared_inter = 24;
  json c = {{"architectures", {arch}},       {"vocab_size", vocab},
            {"hidden_size", hidden},         {"num_hidden_layers", layers},
            {"num_attention_heads", heads},  {"num_key_value_heads", kv},
            {"head_dim", head_dim},          {"intermediate_size", inter},
            {"max_position_embeddings", 256}, {"rms_norm_eps", 1e-5},
            {"rope_theta", 500.0},           {"hidden_act", "silu"},
            {"tie_word_embeddings", arch == "LlamaForCausalLM"},
            {"bos_token_id", 1},             {"eos_token_id", 2},
            {"torch_dtype", "float32"}};
  if (arch == "LlamaForCausalLM") {
    if (linear_rope) c["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    else
      c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 32}};
  }
  if (arch == "MistralForCausalLM") c["sliding_window"] = 256;
  // The DeepSeek-style MoE families: sigmoid routing with e_score_correction_bias, 2 groups of 3
  // experts (topk_group 1), routed_scaling_factor, one shared expert, layer 0 dense.
  const bool ds_moe = arch == "Glm4MoeForCausalLM" || arch == "DeepseekV3ForCausalLM" || arch == "Glm4MoeLiteForCausalLM";
  const bool mla = arch == "DeepseekV3ForCausalLM" || arch == "Glm4MoeLiteForCausalLM";
  // Glm4MoeLite exercises MLA's other options: a plain q_proj (q_lora_rank null), rotate-half
  // RoPE (rope_interleave false), default RoPE, dense layers from mlp_layer_types.
  const bool lite = arch == "Glm4MoeLiteForCausalLM";
  const int64_t q_lora = 24, kv_lora = 16, dn = 8, dr = 4, dv = 6;  // MLA dims
  if (ds_moe) {
    c["n_routed_experts"] = experts;
    c["num_experts_per_tok"] = top_k;
    c["moe_intermediate_size"] = moe_inter;
    c["n_shared_experts"] = 1;
    c["n_group"] = 2;
    c["topk_group"] = 1;
    c["norm_topk_prob"] = true;
    c["routed_scaling_factor"] = 2.5;
    c["first_k_dense_replace"] = 1;
    c["num_nextn_predict_layers"] = 1;
  }
  if (arch == "Glm4MoeForCausalLM") {
    c["attention_bias"] = true;
    c["use_qk_norm"] = true;
    c["partial_rotary_factor"] = 0.5;
    c["head_dim"] = 16;
  }
  if (mla) {  // q_lora_rank set, interleaved rope, YaRN with mscale_all_dim in the softmax scale
    c["q_lora_rank"] = q_lora;
    c["kv_lora_rank"] = kv_lora;
    c["qk_nope_head_dim"] = dn;
    c["qk_rope_head_dim"] = dr;
    c["v_head_dim"] = dv;
    c["rope_interleave"] = true;
    c["head_dim"] = dr;
    c["num_key_value_heads"] = heads;
    c["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 64},
                         {"beta_fast", 32}, {"beta_slow", 1}, {"mscale", 1.0}, {"mscale_all_dim", 1.0}};
  }
  const bool minimax = arch == "MiniMaxM2ForCausalLM";
  if (minimax) {  // full-width q/k norms, rotary_dim = half the head, sigmoid + bias routing
    c["num_local_experts"] = experts;
    c["num_experts_per_tok"] = top_k;
    c["intermediate_size"] = moe_inter;
    c["use_qk_norm"] = true;
    c["rotary_dim"] = 8;
    c["head_dim"] = 16;
    c["scoring_func"] = "sigmoid";
  }
  if (lite) {
    c["q_lora_rank"] = nullptr;
    c["rope_interleave"] = false;
    c.erase("rope_scaling");
    c.erase("first_k_dense_replace");
    c["mlp_layer_types"] = {"dense", "sparse", "sparse"};
    c["n_group"] = 1;
    c["routed_scaling_factor"] = 1.8;
  }
  const bool moe = arch == "Qwen3MoeForCausalLM" || arch == "MixtralForCausalLM" || arch == "Qwen2MoeForCausalLM";
  if (arch == "Qwen3MoeForCausalLM" || arch == "Qwen2MoeForCausalLM") {
    c["num_experts"] = experts;
    c["num_experts_per_tok"] = top_k;
    c["moe_intermediate_size"] = moe_inter;
    c["norm_topk_prob"] = arch == "Qwen3MoeForCausalLM";
    c["decoder_sparse_step"] = arch == "Qwen2MoeForCausalLM" ? 2 : 1;
    c["mlp_only_layers"] = arch == "Qwen3MoeForCausalLM" ? json::array({1}) : json::array();
    if (arch == "Qwen2MoeForCausalLM") c["shared_expert_intermediate_size"] = shared_inter;
  } else if (arch == "MixtralForCausalLM") {
    c["num_local_experts"] = experts;
    c["num_experts_per_tok"] = top_k;
    c["intermediate_size"] = moe_inter;
  }

  TinyModel m;
  m.config = c;
  std::mt19937_64 rng(seed);
  auto add = [&](const std::string& name, Shape shape, float stddev, float mean = 0.0f) {
    std::normal_distribution<float> d(mean, stddev);
    TinyTensor t{shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)))};
    for (float& x : t.v) x = d(rng);
    m.w[name] = std::move(t);
  };
  auto lin = [&](const std::string& name, int64_t n, int64_t k, bool bias = false) {
    add(name + ".weight", {n, k}, 1.0f / std::sqrt(static_cast<float>(k)));
    if (bias) add(name + ".bias", {n}, 0.1f);
  };
  auto mlp = [&](const std::string& p, int64_t i) {
    lin(p + ".gate_proj", i, hidden);
    lin(p + ".up_proj", i, hidden);
    lin(p + ".down_proj", hidden, i);
  };
  add("model.embed_tokens.weight", {vocab, hidden}, 1.0f);
  add("model.norm.weight", {hidden}, 0.1f, 1.0f);
  if (!c["tie_word_embeddings"].get<bool>()) lin("lm_head", vocab, hidden);
  // A multi-token-prediction layer after the last decoder layer: never read (a NaN would show).
  if (ds_moe)
    m.w[fmt::format("model.layers.{}.eh_proj.weight", layers)] = {{hidden, 2 * hidden},
                                                                   std::vector<float>(2 * hidden * hidden, NAN)};
  const bool bias = arch == "Qwen2ForCausalLM" || arch == "Qwen2MoeForCausalLM" || arch == "Glm4MoeForCausalLM";
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    add(p + ".input_layernorm.weight", {hidden}, 0.1f, 1.0f);
    add(p + ".post_attention_layernorm.weight", {hidden}, 0.1f, 1.0f);
    const int64_t hd = c["head_dim"].get<int64_t>();
    if (mla) {
      if (lite) {
        lin(p + ".self_attn.q_proj", heads * (dn + dr), hidden);
      } else {
        lin(p + ".self_attn.q_a_proj", q_lora, hidden);
        add(p + ".self_attn.q_a_layernorm.weight", {q_lora}, 0.1f, 1.0f);
        lin(p + ".self_attn.q_b_proj", heads * (dn + dr), q_lora);
      }
      lin(p + ".self_attn.kv_a_proj_with_mqa", kv_lora + dr, hidden);
      add(p + ".self_attn.kv_a_layernorm.weight", {kv_lora}, 0.1f, 1.0f);
      lin(p + ".self_attn.kv_b_proj", heads * (dn + dv), kv_lora);
      lin(p + ".self_attn.o_proj", hidden, heads * dv);
    } else {
      lin(p + ".self_attn.q_proj", heads * hd, hidden, bias);
      lin(p + ".self_attn.k_proj", kv * hd, hidden, bias);
      lin(p + ".self_attn.v_proj", kv * hd, hidden, bias);
      lin(p + ".self_attn.o_proj", hidden, heads * hd);
    }
    if (arch == "Qwen3ForCausalLM" || arch == "Qwen3MoeForCausalLM" || arch == "Glm4MoeForCausalLM") {
      add(p + ".self_attn.q_norm.weight", {hd}, 0.1f, 1.0f);
      add(p + ".self_attn.k_norm.weight", {hd}, 0.1f, 1.0f);
    }
    if (minimax) {
      add(p + ".self_attn.q_norm.weight", {heads * hd}, 0.1f, 1.0f);
      add(p + ".self_attn.k_norm.weight", {kv * hd}, 0.1f, 1.0f);
      const std::string b = p + ".block_sparse_moe";
      lin(b + ".gate", experts, hidden);
      add(b + ".e_score_correction_bias", {experts}, 0.3f);
      for (int64_t e = 0; e < experts; ++e) {
        const std::string ep = fmt::format("{}.experts.{}", b, e);
        lin(ep + ".w1", moe_inter, hidden);
        lin(ep + ".w3", moe_inter, hidden);
        lin(ep + ".w2", hidden, moe_inter);
      }
      continue;
    }
    if (ds_moe) {
      if (l == 0) {  // first_k_dense_replace 1 / mlp_layer_types[0] "dense"
        mlp(p + ".mlp", inter);
        continue;
      }
      lin(p + ".mlp.gate", experts, hidden);
      add(p + ".mlp.gate.e_score_correction_bias", {experts}, 0.3f);
      for (int64_t e = 0; e < experts; ++e) mlp(fmt::format("{}.mlp.experts.{}", p, e), moe_inter);
      mlp(p + ".mlp.shared_experts", moe_inter);
      continue;
    }
    bool sparse = moe;
    if (arch == "Qwen3MoeForCausalLM" && l == 1) sparse = false;
    if (arch == "Qwen2MoeForCausalLM" && (l + 1) % 2 != 0) sparse = false;
    if (!sparse) {
      mlp(p + ".mlp", inter);
      continue;
    }
    const bool mixtral = arch == "MixtralForCausalLM";
    const std::string b = p + (mixtral ? ".block_sparse_moe" : ".mlp");
    lin(b + ".gate", experts, hidden);
    for (int64_t e = 0; e < experts; ++e) {
      const std::string ep = fmt::format("{}.experts.{}", b, e);
      if (mixtral) {
        lin(ep + ".w1", moe_inter, hidden);
        lin(ep + ".w3", moe_inter, hidden);
        lin(ep + ".w2", hidden, moe_inter);
      } else {
        mlp(ep, moe_inter);
      }
    }
    if (arch == "Qwen2MoeForCausalLM") {
      mlp(b + ".shared_expert", shared_inter);
      lin(b + ".shared_expert_gate", 1, hidden);
    }
  }
  return m;
}

inline void write_tiny_model(const TinyModel& m, const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  io::SafetensorsWriter st;
  for (const auto& [name, t] : m.w) st.add(name, DType::F32, t.shape, t.v);
  st.write((dir / "model.safetensors").string());
  std::ofstream(dir / "config.json") << m.config.dump(2);
}

// ---- the float64 reference forward ----
namespace naive {

using Vec = std::vector<double>;

inline Vec matvec(const TinyTensor& w, const Vec& x, const TinyTensor* bias = nullptr) {
  const int64_t n = w.shape[0], k = w.shape[1];
  Vec y(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    double acc = bias ? bias->v[r] : 0.0;
    for (int64_t j = 0; j < k; ++j) acc += static_cast<double>(w.v[r * k + j]) * x[j];
    y[r] = acc;
  }
  return y;
}

inline Vec rms_norm(const Vec& x, const float* w, size_t off, size_t n, double eps) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
  const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
  Vec y(n);
  for (size_t i = 0; i < n; ++i) y[i] = x[off + i] * inv * w[i];
  return y;
}

inline double silu(double x) { return x / (1.0 + std::exp(-x)); }

// RoPE inverse frequencies from the formulas in the HF docs (float64).
inline Vec inv_freq(const nlohmann::json& c, int64_t head_dim) {
  const double theta = c.value("rope_theta", 10000.0);
  Vec f(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < f.size(); ++i) f[i] = std::pow(theta, -2.0 * static_cast<double>(i) / head_dim);
  if (!c.contains("rope_scaling") || c["rope_scaling"].is_null()) return f;
  const auto& s = c["rope_scaling"];
  const std::string type = s.value("rope_type", s.value("type", std::string()));
  const double factor = s["factor"].get<double>();
  if (type == "linear")
    for (double& x : f) x /= factor;
  if (type == "yarn") {  // HF _compute_yarn_parameters
    const double orig = s["original_max_position_embeddings"].get<double>();
    auto corr = [&](double rot) { return head_dim * std::log(orig / (rot * 2 * std::numbers::pi)) / (2 * std::log(theta)); };
    const double lo = std::max(std::floor(corr(s.value("beta_fast", 32.0))), 0.0);
    double hi = std::min(std::ceil(corr(s.value("beta_slow", 1.0))), head_dim - 1.0);
    if (lo == hi) hi += 0.001;
    for (size_t i = 0; i < f.size(); ++i) {
      const double keep = 1 - std::clamp((static_cast<double>(i) - lo) / (hi - lo), 0.0, 1.0);
      f[i] = f[i] / factor * (1 - keep) + f[i] * keep;
    }
  }
  if (type == "llama3") {
    const double lo = s["low_freq_factor"], hi = s["high_freq_factor"];
    const double old = s["original_max_position_embeddings"].get<double>();
    for (double& x : f) {
      const double wavelen = 2 * std::numbers::pi / x;
      if (wavelen < old / hi) continue;                      // high frequency: unchanged
      if (wavelen > old / lo) { x /= factor; continue; }     // low frequency: slowed
      const double smooth = (old / wavelen - lo) / (hi - lo);
      x = (1 - smooth) * x / factor + smooth * x;
    }
  }
  return f;
}

inline void rope(double* v, int64_t head_dim, int64_t pos, const Vec& f, int64_t rope_dim = 0) {
  const int64_t half = (rope_dim ? rope_dim : head_dim) / 2;
  for (int64_t i = 0; i < half; ++i) {
    const double a = v[i], b = v[i + half], ang = static_cast<double>(pos) * f[i];
    v[i] = a * std::cos(ang) - b * std::sin(ang);
    v[i + half] = b * std::cos(ang) + a * std::sin(ang);
  }
}

inline Vec swiglu(const TinyWeights& w, const std::string& gate, const std::string& up, const std::string& down,
                  const Vec& x) {
  Vec g = matvec(w.at(gate + ".weight"), x), u = matvec(w.at(up + ".weight"), x);
  for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
  return matvec(w.at(down + ".weight"), g);
}

// DeepSeek-style MoE (HF DeepseekV3TopkRouter / Glm4MoeTopkRouter): sigmoid scores; groups
// ranked by the sum of their two best biased scores, the topk_group best kept; top_k experts by
// biased score among them; weights the unbiased scores / their sum × routed_scaling_factor; the
// shared experts added.
inline Vec sigmoid_moe(const nlohmann::json& c, const TinyWeights& w, const std::string& b, const Vec& x) {
  const Vec logits = matvec(w.at(b + ".gate.weight"), x);
  const int64_t ne = static_cast<int64_t>(logits.size()), top_k = c["num_experts_per_tok"];
  const int64_t groups = c["n_group"], keep_groups = c["topk_group"], per = ne / groups;
  const std::vector<float>& bias = w.at(b + ".gate.e_score_correction_bias").v;
  Vec score(ne), choice(ne);
  for (int64_t e = 0; e < ne; ++e) {
    score[e] = 1 / (1 + std::exp(-logits[e]));
    choice[e] = score[e] + bias[e];
  }
  std::vector<std::pair<double, int64_t>> g;
  for (int64_t gi = 0; gi < groups; ++gi) {
    Vec v(choice.begin() + gi * per, choice.begin() + (gi + 1) * per);
    std::sort(v.rbegin(), v.rend());
    g.push_back({v[0] + v[1], gi});
  }
  std::sort(g.begin(), g.end(), [](auto a, auto b2) { return a.first > b2.first; });
  std::vector<bool> allowed(ne, false);
  for (int64_t j = 0; j < keep_groups; ++j)
    for (int64_t e = g[j].second * per; e < (g[j].second + 1) * per; ++e) allowed[e] = true;
  std::vector<int64_t> chosen;
  for (int64_t j = 0; j < top_k; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < ne; ++e)
      if (allowed[e] && (best < 0 || choice[e] > choice[best])) best = e;
    allowed[best] = false;
    chosen.push_back(best);
  }
  double total = 0;
  for (int64_t e : chosen) total += score[e];
  const double scaling = c["routed_scaling_factor"];
  Vec y(x.size(), 0.0);
  for (int64_t e : chosen) {
    const std::string ep = fmt::format("{}.experts.{}", b, e);
    Vec out = swiglu(w, ep + ".gate_proj", ep + ".up_proj", ep + ".down_proj", x);
    const double wt = (c.value("norm_topk_prob", true) ? score[e] / total : score[e]) * scaling;
    for (size_t i = 0; i < y.size(); ++i) y[i] += wt * out[i];
  }
  const std::string sp = b + ".shared_experts";
  Vec s = swiglu(w, sp + ".gate_proj", sp + ".up_proj", sp + ".down_proj", x);
  for (size_t i = 0; i < y.size(); ++i) y[i] += s[i];
  return y;
}

// MiniMax-M2's block (HF MiniMaxM2TopKRouter): sigmoid scores, top_k by score + bias, weights
// the unbiased scores / their sum; Mixtral's expert names.
inline Vec minimax_moe(const nlohmann::json& c, const TinyWeights& w, const std::string& b, const Vec& x) {
  const Vec logits = matvec(w.at(b + ".gate.weight"), x);
  const int64_t ne = static_cast<int64_t>(logits.size()), top_k = c["num_experts_per_tok"];
  const std::vector<float>& bias = w.at(b + ".e_score_correction_bias").v;
  std::vector<std::pair<double, int64_t>> order;
  Vec score(ne);
  for (int64_t e = 0; e < ne; ++e) {
    score[e] = 1 / (1 + std::exp(-logits[e]));
    order.push_back({-(score[e] + bias[e]), e});
  }
  std::sort(order.begin(), order.end());
  double total = 0;
  for (int64_t j = 0; j < top_k; ++j) total += score[order[j].second];
  Vec y(x.size(), 0.0);
  for (int64_t j = 0; j < top_k; ++j) {
    const int64_t e = order[j].second;
    const std::string ep = fmt::format("{}.experts.{}", b, e);
    Vec out = swiglu(w, ep + ".w1", ep + ".w3", ep + ".w2", x);
    for (size_t i = 0; i < y.size(); ++i) y[i] += score[e] / total * out[i];
  }
  return y;
}

// Multi-head latent attention as HF's DeepseekV3Attention computes it (the expanded form: K/V
// rebuilt from the latents with kv_b_proj), interleaved RoPE pairs (2i, 2i+1) with YaRN's
// attention factor on cos/sin and its mscale_all_dim² in the softmax scale. Updates h.
inline void mla_attention(const nlohmann::json& c, const TinyWeights& w, const std::string& p, const Vec& f,
                          std::vector<Vec>& h) {
  const int64_t hidden = c["hidden_size"], heads = c["num_attention_heads"];
  const int64_t kv_lora = c["kv_lora_rank"], dn = c["qk_nope_head_dim"], dr = c["qk_rope_head_dim"];
  const int64_t dv = c["v_head_dim"];
  const bool has_q_lora = c.contains("q_lora_rank") && !c["q_lora_rank"].is_null();
  const double eps = c["rms_norm_eps"];
  double scale = 1 / std::sqrt(static_cast<double>(dn + dr)), attn_factor = 1;
  if (c.contains("rope_scaling") && c["rope_scaling"].value("type", std::string()) == "yarn") {
    const auto& rs = c["rope_scaling"];
    auto ms = [](double s, double m) { return s <= 1 ? 1.0 : 0.1 * m * std::log(s) + 1; };
    const double factor = rs["factor"], m_all = rs.value("mscale_all_dim", 0.0), m = rs.value("mscale", 0.0);
    if (m_all != 0) scale *= ms(factor, m_all) * ms(factor, m_all);
    attn_factor = m != 0 && m_all != 0 ? ms(factor, m) / ms(factor, m_all) : ms(factor, 1.0);
  }
  auto wp = [&](const std::string& name) { return w.at(name).v.data(); };
  const size_t n = h.size();
  const bool interleave = c.value("rope_interleave", true);
  auto rope_pairs = [&](double* x, int64_t pos) {  // HF apply_rotary_pos_emb_interleave
    if (!interleave) {  // HF apply_rotary_pos_emb: rotate-half
      for (int64_t i = 0; i < dr / 2; ++i) {
        const double cs = std::cos(pos * f[i]) * attn_factor, sn = std::sin(pos * f[i]) * attn_factor;
        const double a = x[i], b = x[i + dr / 2];
        x[i] = a * cs - b * sn;
        x[i + dr / 2] = b * cs + a * sn;
      }
      return;
    }
    Vec out(static_cast<size_t>(dr));
    for (int64_t i = 0; i < dr / 2; ++i) {
      const double cs = std::cos(pos * f[i]) * attn_factor, sn = std::sin(pos * f[i]) * attn_factor;
      out[i] = x[2 * i] * cs - x[2 * i + 1] * sn;
      out[dr / 2 + i] = x[2 * i + 1] * cs + x[2 * i] * sn;
    }
    std::copy(out.begin(), out.end(), x);
  };
  std::vector<Vec> q(n), kn(n), vv(n), kr(n);
  for (size_t t = 0; t < n; ++t) {
    Vec x = rms_norm(h[t], wp(p + ".input_layernorm.weight"), 0, hidden, eps);
    if (has_q_lora) {
      Vec qa = matvec(w.at(p + ".self_attn.q_a_proj.weight"), x);
      qa = rms_norm(qa, wp(p + ".self_attn.q_a_layernorm.weight"), 0, qa.size(), 1e-6);  // HF's default, not rms_norm_eps
      q[t] = matvec(w.at(p + ".self_attn.q_b_proj.weight"), qa);
    } else {
      q[t] = matvec(w.at(p + ".self_attn.q_proj.weight"), x);
    }
    Vec kv = matvec(w.at(p + ".self_attn.kv_a_proj_with_mqa.weight"), x);
    Vec lat = rms_norm(kv, wp(p + ".self_attn.kv_a_layernorm.weight"), 0, kv_lora, 1e-6);
    kr[t] = Vec(kv.begin() + kv_lora, kv.end());
    rope_pairs(kr[t].data(), static_cast<int64_t>(t));
    for (int64_t hh = 0; hh < heads; ++hh) rope_pairs(q[t].data() + hh * (dn + dr) + dn, static_cast<int64_t>(t));
    kn[t] = matvec(w.at(p + ".self_attn.kv_b_proj.weight"), lat);  // per head [k_nope | v]
  }
  for (size_t t = 0; t < n; ++t) {
    Vec attn(static_cast<size_t>(heads * dv), 0.0);
    for (int64_t hh = 0; hh < heads; ++hh) {
      Vec s(t + 1);
      double mx = -1e300;
      for (size_t u = 0; u <= t; ++u) {
        double d = 0;
        for (int64_t i = 0; i < dn; ++i) d += q[t][hh * (dn + dr) + i] * kn[u][hh * (dn + dv) + i];
        for (int64_t i = 0; i < dr; ++i) d += q[t][hh * (dn + dr) + dn + i] * kr[u][i];
        s[u] = d * scale;
        mx = std::max(mx, s[u]);
      }
      double sum = 0;
      for (double& x : s) sum += x = std::exp(x - mx);
      for (size_t u = 0; u <= t; ++u)
        for (int64_t i = 0; i < dv; ++i) attn[hh * dv + i] += s[u] / sum * kn[u][hh * (dn + dv) + dn + i];
    }
    Vec o = matvec(w.at(p + ".self_attn.o_proj.weight"), attn);
    for (int64_t i = 0; i < hidden; ++i) h[t][i] += o[i];
  }
}

// What a quantized KV cache does to one position's K and V of decoder layer `layer` (after RoPE,
// [kv_heads * head_dim] each), applied before any query reads them; empty: nothing.
using KvHook = std::function<void(int64_t layer, Vec& k, Vec& v)>;

// Logits [tokens.size()][vocab].
inline std::vector<Vec> forward(const TinyModel& m, const std::vector<int32_t>& tokens, const KvHook& kv_hook = {}) {
  const auto& c = m.config;
  const auto& w = m.w;
  const std::string arch = c["architectures"][0];
  const int64_t hidden = c["hidden_size"], heads = c["num_attention_heads"], kvh = c["num_key_value_heads"];
  const int64_t hd = c["head_dim"], layers = c["num_hidden_layers"];
  const double eps = c["rms_norm_eps"];
  // Partial RoPE (GLM-4.x: partial_rotary_factor of each head) and MLA (qk_rope_head_dim).
  const int64_t rope_dim = c.contains("rotary_dim")
                               ? c["rotary_dim"].get<int64_t>()
                               : static_cast<int64_t>(static_cast<double>(hd) * c.value("partial_rotary_factor", 1.0));
  const Vec f = inv_freq(c, rope_dim);
  const bool mla = c.contains("kv_lora_rank");
  const size_t n = tokens.size();
  // Mistral's sliding window: position t attends to (t - window, t] (HF's mask).
  const size_t window = arch == "MistralForCausalLM" && c.contains("sliding_window") && !c["sliding_window"].is_null()
                            ? c["sliding_window"].get<size_t>()
                            : n;
  const bool has_bias = w.count("model.layers.0.self_attn.q_proj.bias") > 0;
  auto wp = [&](const std::string& name) { return w.at(name).v.data(); };
  std::vector<Vec> h(n);
  for (size_t t = 0; t < n; ++t) {
    const float* e = wp("model.embed_tokens.weight") + tokens[t] * hidden;
    h[t] = Vec(e, e + hidden);
  }
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    if (mla) {
      mla_attention(c, w, p, f, h);
    } else {
    std::vector<Vec> q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      Vec x = rms_norm(h[t], wp(p + ".input_layernorm.weight"), 0, hidden, eps);
      auto bias = [&](const char* proj) { return has_bias ? &w.at(p + ".self_attn." + proj + ".bias") : nullptr; };
      q[t] = matvec(w.at(p + ".self_attn.q_proj.weight"), x, bias("q_proj"));
      k[t] = matvec(w.at(p + ".self_attn.k_proj.weight"), x, bias("k_proj"));
      v[t] = matvec(w.at(p + ".self_attn.v_proj.weight"), x, bias("v_proj"));
      if (w.count(p + ".self_attn.q_norm.weight") && w.at(p + ".self_attn.q_norm.weight").v.size() == size_t(heads * hd) &&
          heads * hd != hd) {  // MiniMax-M2: one RMSNorm over the whole projection
        q[t] = rms_norm(q[t], wp(p + ".self_attn.q_norm.weight"), 0, heads * hd, eps);
        k[t] = rms_norm(k[t], wp(p + ".self_attn.k_norm.weight"), 0, kvh * hd, eps);
      } else if (w.count(p + ".self_attn.q_norm.weight")) {
        for (int64_t hh = 0; hh < heads; ++hh) {
          Vec y = rms_norm(q[t], wp(p + ".self_attn.q_norm.weight"), hh * hd, hd, eps);
          std::copy(y.begin(), y.end(), q[t].begin() + hh * hd);
        }
        for (int64_t hh = 0; hh < kvh; ++hh) {
          Vec y = rms_norm(k[t], wp(p + ".self_attn.k_norm.weight"), hh * hd, hd, eps);
          std::copy(y.begin(), y.end(), k[t].begin() + hh * hd);
        }
      }
      for (int64_t hh = 0; hh < heads; ++hh) rope(q[t].data() + hh * hd, hd, static_cast<int64_t>(t), f, rope_dim);
      for (int64_t hh = 0; hh < kvh; ++hh) rope(k[t].data() + hh * hd, hd, static_cast<int64_t>(t), f, rope_dim);
      if (kv_hook) kv_hook(l, k[t], v[t]);
    }
    for (size_t t = 0; t < n; ++t) {
      Vec attn(static_cast<size_t>(heads * hd), 0.0);
      for (int64_t hh = 0; hh < heads; ++hh) {
        const int64_t g = hh / (heads / kvh);
        const size_t lo = t + 1 > window ? t + 1 - window : 0;
        Vec s(t + 1, -1e300);
        double mx = -1e300;
        for (size_t u = lo; u <= t; ++u) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[t][hh * hd + i] * k[u][g * hd + i];
          s[u] = d / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[u]);
        }
        double sum = 0;
        for (double& x : s) sum += x = std::exp(x - mx);
        for (size_t u = lo; u <= t; ++u)
          for (int64_t i = 0; i < hd; ++i) attn[hh * hd + i] += s[u] / sum * v[u][g * hd + i];
      }
      Vec o = matvec(w.at(p + ".self_attn.o_proj.weight"), attn);
      for (int64_t i = 0; i < hidden; ++i) h[t][i] += o[i];
    }
    }
    for (size_t t = 0; t < n; ++t) {
      Vec x = rms_norm(h[t], wp(p + ".post_attention_layernorm.weight"), 0, hidden, eps);
      Vec y;
      const std::string moe_block = p + (arch == "MixtralForCausalLM" ? ".block_sparse_moe" : ".mlp");
      if (w.count(moe_block + ".gate.e_score_correction_bias")) {
        y = sigmoid_moe(c, w, moe_block, x);
      } else if (w.count(p + ".block_sparse_moe.e_score_correction_bias")) {
        y = minimax_moe(c, w, p + ".block_sparse_moe", x);
      } else if (w.count(moe_block + ".gate.weight")) {
        Vec logits = matvec(w.at(moe_block + ".gate.weight"), x);
        const int64_t ne = static_cast<int64_t>(logits.size()), top_k = c["num_experts_per_tok"];
        double mx = *std::max_element(logits.begin(), logits.end()), sum = 0;
        Vec prob(logits.size());
        for (int64_t e = 0; e < ne; ++e) sum += prob[e] = std::exp(logits[e] - mx);
        for (double& pr : prob) pr /= sum;
        std::vector<int64_t> chosen;
        std::vector<bool> used(ne, false);
        for (int64_t j = 0; j < top_k; ++j) {  // selection by repeated max: the per-token loop
          int64_t best = -1;
          for (int64_t e = 0; e < ne; ++e)
            if (!used[e] && (best < 0 || prob[e] > prob[best])) best = e;
          used[best] = true;
          chosen.push_back(best);
        }
        const bool renorm = arch == "MixtralForCausalLM" || c.value("norm_topk_prob", false);
        double total = 0;
        for (int64_t e : chosen) total += prob[e];
        y.assign(static_cast<size_t>(hidden), 0.0);
        for (int64_t e : chosen) {
          const std::string ep = fmt::format("{}.experts.{}", moe_block, e);
          Vec out = arch == "MixtralForCausalLM" ? swiglu(w, ep + ".w1", ep + ".w3", ep + ".w2", x)
                                                 : swiglu(w, ep + ".gate_proj", ep + ".up_proj", ep + ".down_proj", x);
          const double wt = renorm ? prob[e] / total : prob[e];
          for (int64_t i = 0; i < hidden; ++i) y[i] += wt * out[i];
        }
        if (w.count(moe_block + ".shared_expert_gate.weight")) {
          const std::string sp = moe_block + ".shared_expert";
          Vec s = swiglu(w, sp + ".gate_proj", sp + ".up_proj", sp + ".down_proj", x);
          const double gate = 1.0 / (1.0 + std::exp(-matvec(w.at(moe_block + ".shared_expert_gate.weight"), x)[0]));
          for (int64_t i = 0; i < hidden; ++i) y[i] += gate * s[i];
        }
      } else {
        y = swiglu(w, p + ".mlp.gate_proj", p + ".mlp.up_proj", p + ".mlp.down_proj", x);
      }
      for (int64_t i = 0; i < hidden; ++i) h[t][i] += y[i];
    }
  }
  const TinyTensor& head = w.count("lm_head.weight") ? w.at("lm_head.weight") : w.at("model.embed_tokens.weight");
  std::vector<Vec> logits(n);
  for (size_t t = 0; t < n; ++t) logits[t] = matvec(head, rms_norm(h[t], wp("model.norm.weight"), 0, hidden, eps));
  return logits;
}

}  // namespace naive
}  // namespace fp4lm::test
