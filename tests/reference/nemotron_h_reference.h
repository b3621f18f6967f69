#pragma once
// A tiny random Nemotron-H checkpoint in the published layout (backbone.*, hybrid_override_pattern,
// float32) and the float64 forward written for the tests from transformers' NemotronH modeling,
// not from the engine: one mixer per layer behind one RMSNorm; Mamba-2 with the conv over the
// zero-padded whole sequence and the selective-scan recurrence over all positions; attention
// without RoPE recomputed per position; the relu² MLP. Header-only so tests/engine can use it.
#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "reference/tiny_models.h"

namespace fp4lm::test::nemotron {

using naive::Vec;

struct Dims {
  std::string pattern = "M*-M-M*";
  int64_t hidden = 32, heads = 4, kvh = 2, hd = 8, inter = 40, vocab = 97;
  int64_t mh = 4, mp = 6, ns = 12, groups = 2, kconv = 4;  // Mamba heads, head_dim, state, groups
  double dt_lo = 0.05, dt_hi = 2.0, eps = 1e-5;
  // 'E' layers: experts, top-k, the experts' and shared expert's sizes, latent width (0: none),
  // routing groups, scaling.
  int64_t experts = 8, top_k = 2, moe_inter = 16, shared_inter = 24, latent = 0, n_group = 2, topk_group = 1;
  double scaling = 2.5;
  bool norm_topk = true;
  int64_t mi() const { return mh * mp; }
  int64_t conv_dim() const { return mi() + 2 * groups * ns; }
};

inline TinyModel make_model(const Dims& d, uint64_t seed = 11) {
  nlohmann::json c = {{"architectures", {"NemotronHForCausalLM"}},
                      {"model_type", "nemotron_h"},
                      {"vocab_size", d.vocab},
                      {"hidden_size", d.hidden},
                      {"num_hidden_layers", static_cast<int64_t>(d.pattern.size())},
                      {"hybrid_override_pattern", d.pattern},
                      {"num_attention_heads", d.heads},
                      {"num_key_value_heads", d.kvh},
                      {"head_dim", d.hd},
                      {"intermediate_size", d.inter},
                      {"mlp_hidden_act", "relu2"},
                      {"mamba_hidden_act", "silu"},
                      {"mamba_num_heads", d.mh},
                      {"mamba_head_dim", d.mp},
                      {"ssm_state_size", d.ns},
                      {"n_groups", d.groups},
                      {"conv_kernel", d.kconv},
                      {"chunk_size", 8},
                      {"use_conv_bias", true},
                      {"use_bias", false},
                      {"time_step_limit", {d.dt_lo, d.dt_hi}},
                      {"time_step_min", 0.0},
                      {"layer_norm_epsilon", d.eps},
                      {"max_position_embeddings", 256},
                      {"tie_word_embeddings", false},
                      {"bos_token_id", 1},
                      {"eos_token_id", 2},
                      {"torch_dtype", "float32"}};
  TinyModel m;
  m.config = c;
  std::mt19937_64 rng(seed);
  auto add = [&](const std::string& name, Shape shape, float stddev, float mean = 0.0f) {
    std::normal_distribution<float> dist(mean, stddev);
    TinyTensor t{shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)))};
    for (float& x : t.v) x = dist(rng);
    m.w[name] = std::move(t);
  };
  auto lin = [&](const std::string& name, int64_t n, int64_t k) {
    add(name + ".weight", {n, k}, 1.0f / std::sqrt(static_cast<float>(k)));
  };
  if (d.pattern.find('E') != std::string::npos) {
    c["n_routed_experts"] = d.experts;
    c["num_experts_per_tok"] = d.top_k;
    c["moe_intermediate_size"] = d.moe_inter;
    c["moe_shared_expert_intermediate_size"] = d.shared_inter;
    c["n_shared_experts"] = 1;
    c["n_group"] = d.n_group;
    c["topk_group"] = d.topk_group;
    c["routed_scaling_factor"] = d.scaling;
    c["norm_topk_prob"] = d.norm_topk;
    if (d.latent > 0) c["moe_latent_size"] = d.latent;
    m.config = c;
  }
  add("backbone.embeddings.weight", {d.vocab, d.hidden}, 1.0f);
  add("backbone.norm_f.weight", {d.hidden}, 0.1f, 1.0f);
  lin("lm_head", d.vocab, d.hidden);
  for (size_t l = 0; l < d.pattern.size(); ++l) {
    const std::string p = fmt::format("backbone.layers.{}.", l);
    add(p + "norm.weight", {d.hidden}, 0.1f, 1.0f);
    const std::string x = p + "mixer.";
    switch (d.pattern[l]) {
      case 'M':
        lin(x + "in_proj", d.mi() + d.conv_dim() + d.mh, d.hidden);
        add(x + "conv1d.weight", {d.conv_dim(), 1, d.kconv}, 0.4f);
        add(x + "conv1d.bias", {d.conv_dim()}, 0.1f);
        add(x + "A_log", {d.mh}, 0.5f);
        add(x + "D", {d.mh}, 0.5f, 1.0f);
        add(x + "dt_bias", {d.mh}, 1.0f);
        add(x + "norm.weight", {d.mi()}, 0.1f, 1.0f);
        lin(x + "out_proj", d.hidden, d.mi());
        break;
      case '*':
        lin(x + "q_proj", d.heads * d.hd, d.hidden);
        lin(x + "k_proj", d.kvh * d.hd, d.hidden);
        lin(x + "v_proj", d.kvh * d.hd, d.hidden);
        lin(x + "o_proj", d.hidden, d.heads * d.hd);
        break;
      case 'E': {
        const int64_t width = d.latent > 0 ? d.latent : d.hidden;
        lin(x + "gate", d.experts, d.hidden);
        add(x + "gate.e_score_correction_bias", {d.experts}, 0.5f);
        for (int64_t e = 0; e < d.experts; ++e) {
          lin(fmt::format("{}experts.{}.up_proj", x, e), d.moe_inter, width);
          lin(fmt::format("{}experts.{}.down_proj", x, e), width, d.moe_inter);
        }
        lin(x + "shared_experts.up_proj", d.shared_inter, d.hidden);
        lin(x + "shared_experts.down_proj", d.hidden, d.shared_inter);
        if (d.latent > 0) {
          lin(x + "fc1_latent_proj", d.latent, d.hidden);
          lin(x + "fc2_latent_proj", d.hidden, d.latent);
        }
        break;
      }
      default:
        lin(x + "up_proj", d.inter, d.hidden);
        lin(x + "down_proj", d.hidden, d.inter);
    }
  }
  return m;
}

inline double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }

// The float64 forward: logits [n][vocab].
inline std::vector<Vec> reference(const TinyModel& m, const Dims& d, const std::vector<int32_t>& tokens) {
  namespace nv = naive;
  const auto& w = m.w;
  auto wp = [&](const std::string& name) { return w.at(name).v.data(); };
  const size_t n = tokens.size();
  std::vector<Vec> h(n);
  for (size_t t = 0; t < n; ++t) {
    const float* e = wp("backbone.embeddings.weight") + tokens[t] * d.hidden;
    h[t] = Vec(e, e + d.hidden);
  }
  for (size_t l = 0; l < d.pattern.size(); ++l) {
    const std::string p = fmt::format("backbone.layers.{}.", l), x = p + "mixer.";
    std::vector<Vec> in(n), out(n);
    for (size_t t = 0; t < n; ++t) in[t] = nv::rms_norm(h[t], wp(p + "norm.weight"), 0, d.hidden, d.eps);
    if (d.pattern[l] == 'M') {
      const int64_t I = d.mi(), CD = d.conv_dim(), H = d.mh, P = d.mp, N = d.ns, G = d.groups, K = d.kconv;
      std::vector<Vec> proj(n), conv(n);
      for (size_t t = 0; t < n; ++t) proj[t] = nv::matvec(w.at(x + "in_proj.weight"), in[t]);
      for (size_t t = 0; t < n; ++t) {  // causal depthwise conv over the zero-padded sequence, SiLU
        conv[t].assign(static_cast<size_t>(CD), 0.0);
        for (int64_t ch = 0; ch < CD; ++ch) {
          double acc = wp(x + "conv1d.bias")[ch];
          for (int64_t j = 0; j < K; ++j) {
            const int64_t src = static_cast<int64_t>(t) - (K - 1) + j;
            if (src >= 0) acc += static_cast<double>(wp(x + "conv1d.weight")[ch * K + j]) * proj[src][I + ch];
          }
          conv[t][ch] = nv::silu(acc);
        }
      }
      std::vector<Vec> S(static_cast<size_t>(H), Vec(static_cast<size_t>(P * N), 0.0));
      for (size_t t = 0; t < n; ++t) {
        Vec y(static_cast<size_t>(I));
        for (int64_t j = 0; j < H; ++j) {
          const int64_t g = j / (H / G);
          const double dt =
              std::clamp(softplus(proj[t][I + CD + j] + wp(x + "dt_bias")[j]), d.dt_lo, d.dt_hi);
          const double A = -std::exp(static_cast<double>(wp(x + "A_log")[j]));
          for (int64_t pp = 0; pp < P; ++pp) {
            const double xv = conv[t][j * P + pp];
            double acc = 0;
            for (int64_t k = 0; k < N; ++k) {
              double& s = S[j][pp * N + k];
              s = s * std::exp(dt * A) + dt * xv * conv[t][I + g * N + k];
              acc += s * conv[t][I + G * N + g * N + k];
            }
            y[j * P + pp] = acc + wp(x + "D")[j] * xv;
          }
        }
        for (int64_t k = 0; k < I; ++k) y[k] *= nv::silu(proj[t][k]);  // gate z, then the grouped norm
        const int64_t gs = I / G;
        Vec normed(static_cast<size_t>(I));
        for (int64_t g = 0; g < G; ++g) {
          const Vec r = nv::rms_norm(y, wp(x + "norm.weight") + g * gs, static_cast<size_t>(g * gs),
                                     static_cast<size_t>(gs), d.eps);
          std::copy(r.begin(), r.end(), normed.begin() + g * gs);
        }
        out[t] = nv::matvec(w.at(x + "out_proj.weight"), normed);
      }
    } else if (d.pattern[l] == '*') {
      std::vector<Vec> q(n), k(n), v(n);
      for (size_t t = 0; t < n; ++t) {
        q[t] = nv::matvec(w.at(x + "q_proj.weight"), in[t]);
        k[t] = nv::matvec(w.at(x + "k_proj.weight"), in[t]);
        v[t] = nv::matvec(w.at(x + "v_proj.weight"), in[t]);
      }
      for (size_t t = 0; t < n; ++t) {
        Vec attn(static_cast<size_t>(d.heads * d.hd), 0.0);
        for (int64_t hh = 0; hh < d.heads; ++hh) {
          const int64_t g = hh / (d.heads / d.kvh);
          Vec s(t + 1);
          double mx = -1e300, sum = 0;
          for (size_t u = 0; u <= t; ++u) {
            double dot = 0;
            for (int64_t i = 0; i < d.hd; ++i) dot += q[t][hh * d.hd + i] * k[u][g * d.hd + i];
            s[u] = dot / std::sqrt(static_cast<double>(d.hd));
            mx = std::max(mx, s[u]);
          }
          for (size_t u = 0; u <= t; ++u) sum += s[u] = std::exp(s[u] - mx);
          for (size_t u = 0; u <= t; ++u)
            for (int64_t i = 0; i < d.hd; ++i) attn[hh * d.hd + i] += s[u] / sum * v[u][g * d.hd + i];
        }
        out[t] = nv::matvec(w.at(x + "o_proj.weight"), attn);
      }
    } else if (d.pattern[l] == 'E') {
      auto relu2 = [&](const std::string& pre, const Vec& v) {
        Vec u = nv::matvec(w.at(pre + ".up_proj.weight"), v);
        for (double& e : u) e = e > 0 ? e * e : 0.0;
        return nv::matvec(w.at(pre + ".down_proj.weight"), u);
      };
      const float* bias = wp(x + "gate.e_score_correction_bias");
      const int64_t per_group = d.experts / d.n_group;
      for (size_t t = 0; t < n; ++t) {
        // Router: sigmoid scores; choice on score + bias within the topk_group groups whose two
        // best biased scores sum highest; weights the unbiased scores, normalized, scaled.
        const Vec logits = nv::matvec(w.at(x + "gate.weight"), in[t]);
        Vec score(logits.size()), biased(logits.size());
        for (size_t e = 0; e < logits.size(); ++e) {
          score[e] = 1.0 / (1.0 + std::exp(-logits[e]));
          biased[e] = score[e] + bias[e];
        }
        std::vector<std::pair<double, int64_t>> groups;
        for (int64_t g = 0; g < d.n_group; ++g) {
          std::vector<double> v(biased.begin() + g * per_group, biased.begin() + (g + 1) * per_group);
          std::sort(v.rbegin(), v.rend());
          groups.push_back({-(v[0] + v[1]), g});
        }
        std::sort(groups.begin(), groups.end());
        std::vector<std::pair<double, int64_t>> cand;
        for (int64_t gi = 0; gi < d.topk_group; ++gi)
          for (int64_t e = groups[gi].second * per_group; e < (groups[gi].second + 1) * per_group; ++e)
            cand.push_back({-biased[e], e});
        std::sort(cand.begin(), cand.end());
        double sum = 0;
        for (int64_t j = 0; j < d.top_k; ++j) sum += score[cand[j].second];
        Vec xin = in[t];
        if (d.latent > 0) xin = nv::matvec(w.at(x + "fc1_latent_proj.weight"), in[t]);
        Vec acc(xin.size(), 0.0);
        for (int64_t j = 0; j < d.top_k; ++j) {
          const int64_t e = cand[j].second;
          const double wt = score[e] / (d.norm_topk ? sum + 1e-20 : 1.0) * d.scaling;
          const Vec o = relu2(fmt::format("{}experts.{}", x, e), xin);
          for (size_t i = 0; i < acc.size(); ++i) acc[i] += wt * o[i];
        }
        out[t] = d.latent > 0 ? nv::matvec(w.at(x + "fc2_latent_proj.weight"), acc) : acc;
        const Vec sh = relu2(x + "shared_experts", in[t]);
        for (int64_t i = 0; i < d.hidden; ++i) out[t][i] += sh[i];
      }
    } else {
      for (size_t t = 0; t < n; ++t) {
        Vec u = nv::matvec(w.at(x + "up_proj.weight"), in[t]);
        for (double& e : u) e = e > 0 ? e * e : 0.0;
        out[t] = nv::matvec(w.at(x + "down_proj.weight"), u);
      }
    }
    for (size_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < d.hidden; ++i) h[t][i] += out[t][i];
  }
  std::vector<Vec> logits(n);
  for (size_t t = 0; t < n; ++t)
    logits[t] = nv::matvec(w.at("lm_head.weight"), nv::rms_norm(h[t], wp("backbone.norm_f.weight"), 0, d.hidden, d.eps));
  return logits;
}

}  // namespace fp4lm::test::nemotron
