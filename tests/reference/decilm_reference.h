#pragma once
// DeciLMForCausalLM (Llama-Nemotron NAS) for tests: a tiny random checkpoint with a layer of each
// block kind, and a float64 forward written from the remote code's published semantics
// (modeling_decilm.py / block_config.py, which transformers does not ship, so no golden can come
// from it): per layer, attention with num_attention_heads / n_heads_in_group KV heads, or nothing
// (no_op: no norm either), or h += linear_attn(input_layernorm(h)); the FFN a SwiGLU of
// round_up(int(2 * ffn_mult * hidden / 3), 256), or nothing, or h += linear_mlp(norm(h)).
// Llama's RoPE with llama3 scaling. Header-only.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "reference/tiny_models.h"

namespace fp4lm::test::decilm_ref {

using nlohmann::json;
using naive::Vec;

// The remote code's rule, written out as Python evaluates it: ((2 * mult) * hidden) / 3 in
// float64, truncated by int(), then the next multiple of 256 at or above it.
inline int64_t intermediate_size(double ffn_mult, int64_t hidden) {
  const double x = 2.0 * ffn_mult * static_cast<double>(hidden) / 3.0;
  const int64_t n = static_cast<int64_t>(x);
  return (n + 255) / 256 * 256;
}

// Six layers: GQA (n_heads_in_group 2) + ffn_mult 2.625 (256); attention no_op + ffn_mult 13
// (512); attention replace_with_linear + ffn no_op; MHA (n_heads_in_group 1) + ffn
// replace_with_linear; MQA (n_heads_in_group 4) written in the published form (every option key
// present, null / false) + ffn_mult 1; both no_op (the identity layer).
inline TinyModel make_decilm(bool tied, uint64_t seed = 11) {
  const int64_t hidden = 32, heads = 4, vocab = 97;
  const json attn_off = {{"sparsify", nullptr},        {"num_sink_tokens", nullptr},
                         {"unshifted_sink", false},    {"use_prefill_window_in_sink_attention", false},
                         {"window_length", nullptr},   {"replace_with_linear", false},
                         {"no_op", false},             {"n_heads_in_group", 4}};
  const json blocks = {
      {{"attention", {{"n_heads_in_group", 2}}}, {"ffn", {{"ffn_mult", 2.625}}}},
      {{"attention", {{"no_op", true}, {"n_heads_in_group", nullptr}}}, {"ffn", {{"ffn_mult", 13.0}}}},
      {{"attention", {{"replace_with_linear", true}}}, {"ffn", {{"no_op", true}}}},
      {{"attention", {{"n_heads_in_group", 1}}}, {"ffn", {{"replace_with_linear", true}, {"ffn_mult", nullptr}}}},
      {{"attention", attn_off}, {"ffn", {{"ffn_mult", 1.0}, {"no_op", false}, {"replace_with_linear", false}, {"sparsify", nullptr}}}},
      {{"attention", {{"no_op", true}}}, {"ffn", {{"no_op", true}}}},
  };
  json c = {{"architectures", {"DeciLMForCausalLM"}},
            {"model_type", "nemotron-nas"},
            {"vocab_size", vocab},
            {"hidden_size", hidden},
            {"num_hidden_layers", blocks.size()},
            {"num_attention_heads", heads},
            {"num_key_value_heads", nullptr},
            {"intermediate_size", nullptr},
            {"max_position_embeddings", 256},
            {"rms_norm_eps", 1e-5},
            {"rope_theta", 500.0},
            {"rope_scaling",
             {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
              {"original_max_position_embeddings", 32}}},
            {"hidden_act", "silu"},
            {"attention_bias", false},
            {"mlp_bias", false},
            {"tie_word_embeddings", tied},
            {"bos_token_id", 1},
            {"eos_token_id", 2},
            {"torch_dtype", "float32"},
            {"block_configs", blocks}};
  TinyModel m{c, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto add = [&](const std::string& name, Shape s, float scale, float offset = 0.0f) {
    TinyTensor t{s, {}};
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    t.v.resize(static_cast<size_t>(n));
    for (float& x : t.v) x = offset + scale * nd(rng);
    m.w[name] = std::move(t);
  };
  auto lin = [&](const std::string& name, int64_t out, int64_t in) {
    add(name + ".weight", {out, in}, 1.0f / std::sqrt(static_cast<float>(in)));
  };
  const int64_t hd = hidden / heads;
  add("model.embed_tokens.weight", {vocab, hidden}, 1.0f);
  add("model.norm.weight", {hidden}, 0.1f, 1.0f);
  if (!tied) lin("lm_head", vocab, hidden);
  for (size_t l = 0; l < blocks.size(); ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    const json& a = blocks[l]["attention"];
    const json& f = blocks[l]["ffn"];
    if (!a.value("no_op", false)) {
      add(p + ".input_layernorm.weight", {hidden}, 0.1f, 1.0f);
      if (a.value("replace_with_linear", false)) {
        lin(p + ".self_attn.linear_attn", hidden, hidden);
      } else {
        const int64_t kv = heads / a["n_heads_in_group"].get<int64_t>();
        lin(p + ".self_attn.q_proj", heads * hd, hidden);
        lin(p + ".self_attn.k_proj", kv * hd, hidden);
        lin(p + ".self_attn.v_proj", kv * hd, hidden);
        lin(p + ".self_attn.o_proj", hidden, heads * hd);
      }
    }
    if (!f.value("no_op", false)) {
      add(p + ".post_attention_layernorm.weight", {hidden}, 0.1f, 1.0f);
      if (f.value("replace_with_linear", false)) {
        lin(p + ".mlp.linear_mlp", hidden, hidden);
      } else {
        const int64_t inter = intermediate_size(f["ffn_mult"].get<double>(), hidden);
        lin(p + ".mlp.gate_proj", inter, hidden);
        lin(p + ".mlp.up_proj", inter, hidden);
        lin(p + ".mlp.down_proj", hidden, inter);
      }
    }
  }
  return m;
}

// Logits [tokens.size()][vocab], float64, the whole sequence recomputed.
inline std::vector<Vec> forward(const TinyModel& m, const std::vector<int32_t>& tokens) {
  using namespace naive;
  const json& c = m.config;
  const auto& w = m.w;
  const int64_t hidden = c["hidden_size"], heads = c["num_attention_heads"], hd = hidden / heads;
  const double eps = c["rms_norm_eps"];
  const Vec f = inv_freq(c, hd);
  const size_t n = tokens.size();
  auto wp = [&](const std::string& name) { return w.at(name).v.data(); };
  std::vector<Vec> h(n);
  for (size_t t = 0; t < n; ++t) {
    const float* e = wp("model.embed_tokens.weight") + tokens[t] * hidden;
    h[t] = Vec(e, e + hidden);
  }
  const json& blocks = c["block_configs"];
  for (size_t l = 0; l < blocks.size(); ++l) {
    const std::string p = fmt::format("model.layers.{}", l);
    const json& a = blocks[l]["attention"];
    const json& fc = blocks[l]["ffn"];
    if (!a.value("no_op", false)) {
      std::vector<Vec> x(n);
      for (size_t t = 0; t < n; ++t) x[t] = rms_norm(h[t], wp(p + ".input_layernorm.weight"), 0, hidden, eps);
      std::vector<Vec> out(n);
      if (a.value("replace_with_linear", false)) {
        for (size_t t = 0; t < n; ++t) out[t] = matvec(w.at(p + ".self_attn.linear_attn.weight"), x[t]);
      } else {
        const int64_t kvh = heads / a["n_heads_in_group"].get<int64_t>();
        std::vector<Vec> q(n), k(n), v(n);
        for (size_t t = 0; t < n; ++t) {
          q[t] = matvec(w.at(p + ".self_attn.q_proj.weight"), x[t]);
          k[t] = matvec(w.at(p + ".self_attn.k_proj.weight"), x[t]);
          v[t] = matvec(w.at(p + ".self_attn.v_proj.weight"), x[t]);
          for (int64_t hh = 0; hh < heads; ++hh) rope(q[t].data() + hh * hd, hd, static_cast<int64_t>(t), f);
          for (int64_t hh = 0; hh < kvh; ++hh) rope(k[t].data() + hh * hd, hd, static_cast<int64_t>(t), f);
        }
        for (size_t t = 0; t < n; ++t) {
          Vec attn(static_cast<size_t>(heads * hd), 0.0);
          for (int64_t hh = 0; hh < heads; ++hh) {
            const int64_t g = hh / (heads / kvh);
            Vec s(t + 1);
            double mx = -1e300;
            for (size_t u = 0; u <= t; ++u) {
              double d = 0;
              for (int64_t i = 0; i < hd; ++i) d += q[t][hh * hd + i] * k[u][g * hd + i];
              s[u] = d / std::sqrt(static_cast<double>(hd));
              mx = std::max(mx, s[u]);
            }
            double sum = 0;
            for (double& e : s) sum += e = std::exp(e - mx);
            for (size_t u = 0; u <= t; ++u)
              for (int64_t i = 0; i < hd; ++i) attn[hh * hd + i] += s[u] / sum * v[u][g * hd + i];
          }
          out[t] = matvec(w.at(p + ".self_attn.o_proj.weight"), attn);
        }
      }
      for (size_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < hidden; ++i) h[t][i] += out[t][i];
    }
    if (!fc.value("no_op", false)) {
      for (size_t t = 0; t < n; ++t) {
        const Vec x = rms_norm(h[t], wp(p + ".post_attention_layernorm.weight"), 0, hidden, eps);
        const Vec y = fc.value("replace_with_linear", false)
                          ? matvec(w.at(p + ".mlp.linear_mlp.weight"), x)
                          : swiglu(w, p + ".mlp.gate_proj", p + ".mlp.up_proj", p + ".mlp.down_proj", x);
        for (int64_t i = 0; i < hidden; ++i) h[t][i] += y[i];
      }
    }
  }
  const TinyTensor& head = w.count("lm_head.weight") ? w.at("lm_head.weight") : w.at("model.embed_tokens.weight");
  std::vector<Vec> logits(n);
  for (size_t t = 0; t < n; ++t) logits[t] = matvec(head, rms_norm(h[t], wp("model.norm.weight"), 0, hidden, eps));
  return logits;
}

}  // namespace fp4lm::test::decilm_ref
