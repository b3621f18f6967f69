// Qwen3.5-MoE hybrid (gated delta-net + gated attention + MoE with shared expert) against a
// float64 forward written here from the published math (issue 14), not from the engine: the
// conv runs over the zero-padded whole sequence, the delta rule as the textbook recurrence over
// all positions, attention recomputed per position. Both checkpoint layouts (flat text-only and
// VL-nested with mtp/visual tensors), GDN value/key head ratios 1, 2 and 4, prompt-at-once vs
// token-by-token vs any prefill chunk, batched vs alone, and a failed forward leaving the state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "core/error.h"
#include "io/safetensors.h"
#include "core/thread_pool.h"
#include "model/causal_lm.h"
#include "model/gated_delta_rule.h"

namespace fp4lm::model {
namespace {

using nlohmann::json;
using test::TempDir;
using Vec = std::vector<double>;

struct T {
  Shape shape;
  std::vector<float> v;
};
struct Hybrid {
  json config;
  std::map<std::string, T> w;
  // dims
  int64_t hidden = 32, heads = 4, kvh = 2, hd = 16, rot = 8, nk = 2, nv = 2, dk = 8, dv = 12, kconv = 4;
  int64_t experts = 4, top_k = 2, inter = 16, shared = 24, vocab = 97, layers = 4;
  std::vector<bool> full;
};

// Layers: linear, full, linear, full (layer_types given); NV = nk * ratio.
Hybrid make_hybrid(int64_t ratio, uint64_t seed = 11) {
  Hybrid m;
  m.nv = m.nk * ratio;
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
  std::mt19937_64 rng(seed);
  auto add = [&](const std::string& name, Shape shape, float sd, float mean = 0) {
    std::normal_distribution<float> d(mean, sd);
    T t{shape, std::vector<float>(static_cast<size_t>(shape_numel(shape)))};
    for (float& x : t.v) x = d(rng);
    m.w[name] = std::move(t);
  };
  auto lin = [&](const std::string& name, int64_t n, int64_t k) {
    add(name + ".weight", {n, k}, 1.0f / std::sqrt(static_cast<float>(k)));
  };
  add("model.embed_tokens.weight", {m.vocab, m.hidden}, 1.0f);
  add("model.norm.weight", {m.hidden}, 0.1f);  // zero-centered: the scale is 1 + w
  lin("lm_head", m.vocab, m.hidden);
  for (int64_t l = 0; l < m.layers; ++l) {
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
  return m;
}

// Flat layout, or the VL one: keys under text_config, tensors under model.language_model.,
// plus mtp.* and model.visual.* tensors that must be ignored.
void write_hybrid(const Hybrid& m, const std::filesystem::path& dir, bool vl = false) {
  std::filesystem::create_directories(dir);
  io::SafetensorsWriter st;
  for (const auto& [name, t] : m.w) {
    std::string n = name;
    if (vl && n.rfind("model.", 0) == 0) n = "model.language_model." + n.substr(6);
    st.add(n, DType::F32, t.shape, t.v);
  }
  json c = m.config;
  if (vl) {
    std::vector<float> junk(16, 1.0f);
    st.add("mtp.layers.0.mlp.gate.weight", DType::F32, {4, 4}, junk);
    st.add("mtp.fc.weight", DType::F32, {4, 4}, junk);
    st.add("model.visual.blocks.0.attn.qkv.weight", DType::F32, {4, 4}, junk);
    json text = c;
    text.erase("architectures");
    text.erase("torch_dtype");
    c = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}},
         {"model_type", "qwen3_5_moe"},
         {"text_config", text},
         {"vision_config", {{"depth", 1}, {"hidden_size", 4}}},
         {"torch_dtype", "float32"}};
  }
  st.write((dir / "model.safetensors").string());
  std::ofstream(dir / "config.json") << c.dump(2);
}

// ---- the float64 reference ----

Vec matvec(const Hybrid& m, const std::string& name, const Vec& x) {
  const T& w = m.w.at(name + ".weight");
  const int64_t n = w.shape[0], k = w.shape[1];
  Vec y(static_cast<size_t>(n), 0.0);
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < k; ++j) y[r] += static_cast<double>(w.v[r * k + j]) * x[j];
  return y;
}
double sigm(double x) { return 1 / (1 + std::exp(-x)); }
double silu(double x) { return x * sigm(x); }
// x / rms(x) · (1 + w) over [off, off + n)  (zero-centered), or · w when !zero_centered.
void rms_inplace(double* x, int64_t n, const std::vector<float>& w, double eps, bool zero_centered) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double inv = 1 / std::sqrt(ss / static_cast<double>(n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * inv * (zero_centered ? 1.0 + w[i] : w[i]);
}
Vec swiglu(const Hybrid& m, const std::string& p, const Vec& x) {
  Vec g = matvec(m, p + ".gate_proj", x), u = matvec(m, p + ".up_proj", x);
  for (size_t i = 0; i < g.size(); ++i) g[i] = silu(g[i]) * u[i];
  return matvec(m, p + ".down_proj", g);
}

std::vector<Vec> reference(const Hybrid& m, const std::vector<int32_t>& tok) {
  const size_t n = tok.size();
  const double eps = 1e-6;
  std::vector<Vec> h(n);
  for (size_t t = 0; t < n; ++t) {
    const float* e = m.w.at("model.embed_tokens.weight").v.data() + tok[t] * m.hidden;
    h[t] = Vec(e, e + m.hidden);
  }
  for (int64_t l = 0; l < m.layers; ++l) {
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
              const double ang = static_cast<double>(t) * f, c0 = hv[i], c1 = hv[i + half];
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
      Vec r = matvec(m, p + ".mlp.gate", y);
      double mx = *std::max_element(r.begin(), r.end()), sum = 0;
      for (double& e : r) sum += e = std::exp(e - mx);
      for (double& e : r) e /= sum;
      std::vector<int64_t> order(static_cast<size_t>(m.experts));
      for (int64_t e = 0; e < m.experts; ++e) order[e] = e;
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return r[a] > r[b]; });
      double tot = 0;
      for (int64_t j = 0; j < m.top_k; ++j) tot += r[order[j]];
      Vec out(static_cast<size_t>(m.hidden), 0.0);
      for (int64_t j = 0; j < m.top_k; ++j) {
        Vec eo = swiglu(m, fmt::format("{}.mlp.experts.{}", p, order[j]), y);
        for (int64_t i = 0; i < m.hidden; ++i) out[i] += r[order[j]] / tot * eo[i];
      }
      Vec so = swiglu(m, p + ".mlp.shared_expert", y);
      const double sg = sigm(matvec(m, p + ".mlp.shared_expert_gate", y)[0]);
      for (int64_t i = 0; i < m.hidden; ++i) h[t][i] += out[i] + sg * so[i];
    }
  }
  std::vector<Vec> logits(n);
  for (size_t t = 0; t < n; ++t) {
    Vec y = h[t];
    rms_inplace(y.data(), m.hidden, m.w.at("model.norm.weight").v, eps, true);
    logits[t] = matvec(m, "lm_head", y);
  }
  return logits;
}

// ---- helpers ----
const std::vector<int32_t> kTokens = {1, 17, 5, 96, 40, 40, 3, 62, 11, 80, 29, 7, 50};

EngineOptions f32() {
  EngineOptions o;
  o.dtype = "float32";
  return o;
}

std::vector<float> all_logits(const CausalLM& lm, const std::vector<int32_t>& toks) {
  SequenceState s = lm.new_sequence();
  std::vector<float> out(toks.size() * lm.vocab_size());
  lm.forward(s, toks.data(), static_cast<int64_t>(toks.size()), LogitsMode::all, out.data());
  return out;
}

double max_rel_diff(const std::vector<float>& got, const std::vector<Vec>& want) {
  double diff = 0, scale = 0;
  size_t k = 0;
  for (const Vec& row : want)
    for (double w : row) {
      diff = std::max(diff, std::abs(static_cast<double>(got[k++]) - w));
      scale = std::max(scale, std::abs(w));
    }
  return diff / scale;
}

class HybridRatio : public ::testing::TestWithParam<int64_t> {};

TEST_P(HybridRatio, LogitsMatchFloat64ReferenceInBothLayouts) {
  Hybrid m = make_hybrid(GetParam());
  const auto want = reference(m, kTokens);
  TempDir flat, vl;
  write_hybrid(m, flat.path());
  write_hybrid(m, vl.path(), /*vl=*/true);
  auto a = CausalLM::load(flat.path().string(), f32());
  auto b = CausalLM::load(vl.path().string(), f32());
  EXPECT_EQ(b->config().architecture, "Qwen3_5MoeForConditionalGeneration");
  const auto got = all_logits(*a, kTokens);
  // float32 engine vs float64 reference: rounding only (the recurrence is short).
  EXPECT_LT(max_rel_diff(got, want), 2e-5) << "NV/NK " << GetParam();
  EXPECT_EQ(all_logits(*b, kTokens), got);  // the VL nesting changes names only
}

TEST_P(HybridRatio, TokenByTokenAndEveryPrefillChunkAgreeWithOnePass) {
  TempDir dir;
  write_hybrid(make_hybrid(GetParam()), dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  const auto once = all_logits(*lm, kTokens);
  const int64_t vocab = lm->vocab_size();
  SequenceState s = lm->new_sequence();
  std::vector<float> step(vocab);
  for (size_t t = 0; t < kTokens.size(); ++t) {
    lm->forward(s, &kTokens[t], 1, LogitsMode::last, step.data());
    for (int64_t v = 0; v < vocab; ++v) ASSERT_NEAR(step[v], once[t * vocab + v], 1e-5) << "position " << t;
  }
  for (int64_t chunk : {1, 2, 3, 5, 8}) {
    LoadOptions lo;
    lo.prefill_chunk = chunk;
    auto c = CausalLM::load(dir.path().string(), f32(), lo);
    const auto got = all_logits(*c, kTokens);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], once[i], 1e-5) << "chunk " << chunk << " at " << i;
  }
  // A prompt split over two forward calls continues the recurrent state.
  SequenceState two = lm->new_sequence();
  std::vector<float> first(5 * vocab), rest((kTokens.size() - 5) * vocab);
  lm->forward(two, kTokens.data(), 5, LogitsMode::all, first.data());
  lm->forward(two, kTokens.data() + 5, static_cast<int64_t>(kTokens.size()) - 5, LogitsMode::all, rest.data());
  for (size_t i = 0; i < rest.size(); ++i) ASSERT_NEAR(rest[i], once[5 * vocab + i], 1e-5) << i;
}

INSTANTIATE_TEST_SUITE_P(ValueHeadsPerKeyHead, HybridRatio, ::testing::Values(1, 2, 4));

TEST(Hybrid, BatchedSequencesEqualEachAlone) {
  TempDir dir;
  write_hybrid(make_hybrid(2), dir.path());
  LoadOptions lo;
  lo.prefill_chunk = 7;  // steps that mix sequences and split prompts
  auto lm = CausalLM::load(dir.path().string(), f32(), lo);
  const int64_t vocab = lm->vocab_size();
  const std::vector<std::vector<int32_t>> prompts = {{1, 2, 3, 4, 5}, {9, 8, 7}, {50, 60, 70, 80, 90, 11, 12, 13}};
  std::vector<std::vector<float>> alone;
  for (const auto& p : prompts) alone.push_back(all_logits(*lm, p));
  std::vector<SequenceState> states;
  for (size_t i = 0; i < prompts.size(); ++i) states.push_back(lm->new_sequence());
  std::vector<std::vector<float>> got(prompts.size());
  std::vector<SequenceChunk> batch;
  for (size_t i = 0; i < prompts.size(); ++i) {
    got[i].resize(prompts[i].size() * vocab);
    batch.push_back({&states[i], prompts[i].data(), static_cast<int64_t>(prompts[i].size()), LogitsMode::all,
                     got[i].data()});
  }
  lm->forward(batch);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(got[i], alone[i]) << "sequence " << i;
}

TEST(Hybrid, FailedForwardLeavesTheRecurrentStateAsItWas) {
  TempDir dir;
  Hybrid m = make_hybrid(2);
  write_hybrid(m, dir.path());
  LoadOptions lo;
  lo.prefill_chunk = 2;
  auto lm = CausalLM::load(dir.path().string(), f32(), lo);
  const int64_t vocab = lm->vocab_size();
  SequenceState s = lm->new_sequence();
  std::vector<float> out(vocab);
  lm->forward(s, kTokens.data(), 4, LogitsMode::last, out.data());
  // A token outside the vocabulary after two good steps of this call: Error, state untouched.
  const std::vector<int32_t> bad = {kTokens[4], kTokens[5], kTokens[6], 500};
  EXPECT_THROW(lm->forward(s, bad.data(), 4, LogitsMode::last, out.data()), Error);
  EXPECT_EQ(s.length(), 4);
  std::vector<float> rest((kTokens.size() - 4) * vocab);
  lm->forward(s, kTokens.data() + 4, static_cast<int64_t>(kTokens.size()) - 4, LogitsMode::all, rest.data());
  const auto want = reference(m, kTokens);
  std::vector<Vec> tail(want.begin() + 4, want.end());
  EXPECT_LT(max_rel_diff(rest, tail), 2e-5);
  EXPECT_THROW(s.truncate(2), Error);  // a recurrent state cannot be rewound
  s.truncate(0);
  EXPECT_EQ(s.length(), 0);
}

TEST(Hybrid, Bfloat16ActivationsStayCloseToFloat32) {
  TempDir dir;
  Hybrid m = make_hybrid(2);
  write_hybrid(m, dir.path());
  EngineOptions o;
  o.dtype = "bfloat16";
  auto lm = CausalLM::load(dir.path().string(), o);
  const auto got = all_logits(*lm, kTokens);
  const auto want = reference(m, kTokens);
  // bf16 keeps 8 significant bits: a few percent per position, except where rounding flips a
  // router's top-k choice (a discrete jump; one position of this prompt does): at most 2 such.
  int close = 0;
  double worst_close = 0;
  for (size_t t = 0; t < want.size(); ++t) {
    std::vector<float> row(got.begin() + t * m.vocab, got.begin() + (t + 1) * m.vocab);
    const double d = max_rel_diff(row, {want[t]});
    EXPECT_GT(d, 1e-5) << "position " << t;  // bf16 is in effect
    if (d < 0.05) ++close, worst_close = std::max(worst_close, d);
  }
  EXPECT_GE(close, static_cast<int>(want.size()) - 2) << "worst close position " << worst_close;
}

TEST(Hybrid, ConfigErrorsNameTheField) {
  TempDir dir;
  Hybrid m = make_hybrid(2);
  m.config["linear_num_value_heads"] = 3;
  write_hybrid(m, dir.path());
  try {
    CausalLM::load(dir.path().string(), f32());
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_num_value_heads"), std::string::npos) << e.what();
  }
  m = make_hybrid(2);
  m.config["layer_types"] = {"linear_attention", "full_attention", "mamba", "full_attention"};
  write_hybrid(m, dir.path());
  EXPECT_THROW(CausalLM::load(dir.path().string(), f32()), Error);
}

TEST(Hybrid, FullAttentionIntervalGivesTheLayerTypes) {
  TempDir dir;
  Hybrid m = make_hybrid(1);
  m.config.erase("layer_types");
  m.config["full_attention_interval"] = 2;  // layers 1 and 3 full, as layer_types said
  write_hybrid(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  EXPECT_EQ(lm->config().full_attention, (std::vector<bool>{false, true, false, true}));
  EXPECT_LT(max_rel_diff(all_logits(*lm, kTokens), reference(m, kTokens)), 2e-5);
}

// ---- the chunked prefill (model/gated_delta_rule.h) over prompts longer than a block ----

std::vector<int32_t> long_prompt(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % 97);
  return t;
}

// Logits [n, vocab] of `toks` fed in forward calls of `call` tokens (0 = one call).
std::vector<float> logits_in_calls(const CausalLM& lm, const std::vector<int32_t>& toks, int64_t call) {
  const int64_t vocab = lm.vocab_size(), n = static_cast<int64_t>(toks.size());
  SequenceState s = lm.new_sequence();
  std::vector<float> out(toks.size() * vocab);
  for (int64_t t = 0; t < n;) {
    const int64_t k = call > 0 ? std::min(call, n - t) : n;
    lm.forward(s, toks.data() + t, k, LogitsMode::all, out.data() + t * vocab);
    t += k;
  }
  return out;
}

// Restores the process-wide settings a test changes.
struct RestoreSettings {
  int threads = ThreadPool::global().size();
  ~RestoreSettings() {
    ThreadPool::set_global_threads(threads);
    gdn::set_prefill_form(gdn::PrefillForm::chunked);
  }
};

class HybridLongPrompt : public ::testing::TestWithParam<int64_t> {};

// 200 tokens: blocks of 64, 64, 64 and a remainder of 8. Prompt at once, token by token (the
// recurrent form only), in forward calls of 1, 3, 64 and 100 tokens, in steps of 64 and 100
// rows, and with the recurrent prefill form: all within float32 rounding of the float64 forward.
TEST_P(HybridLongPrompt, EveryPrefillSplitAndBothFormsMatchFloat64) {
  RestoreSettings restore;
  Hybrid m = make_hybrid(GetParam(), 23);
  const std::vector<int32_t> toks = long_prompt(200, 5);
  const auto want = reference(m, toks);
  TempDir dir;
  write_hybrid(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  const double tol = 2e-5;  // of the logit range; measured ≤ 6e-6 (calls and at once)
  const auto once = logits_in_calls(*lm, toks, 0);
  double worst = max_rel_diff(once, want);
  EXPECT_LT(worst, tol) << "at once";
  for (int64_t call : {1, 3, 64, 100}) {
    const double d = max_rel_diff(logits_in_calls(*lm, toks, call), want);
    EXPECT_LT(d, tol) << "calls of " << call;
    worst = std::max(worst, d);
  }
  RecordProperty("worst_rel_diff", fmt::format("{:.2e}", worst));
  for (int64_t step : {64, 100}) {
    LoadOptions lo;
    lo.prefill_chunk = step;
    auto stepped = CausalLM::load(dir.path().string(), f32(), lo);
    const auto got = logits_in_calls(*stepped, toks, 0);
    EXPECT_LT(max_rel_diff(got, want), tol) << "steps of " << step;
    if (step == 64) {
      EXPECT_EQ(got, once);  // steps cut at block boundaries change nothing
    }
  }
  gdn::set_prefill_form(gdn::PrefillForm::recurrent);
  const auto rec = logits_in_calls(*lm, toks, 0);
  EXPECT_LT(max_rel_diff(rec, want), tol) << "recurrent prefill";
  EXPECT_NE(rec, once);  // the chunked form really ran above
}

INSTANTIATE_TEST_SUITE_P(ValueHeadsPerKeyHead, HybridLongPrompt, ::testing::Values(1, 2, 4));

// Chunked prefills next to decodes: each sequence's logits are bit-identical alone (the same
// forward calls) and in batches, whatever the step size (steps cut only at block boundaries)
// and thread count.
TEST(Hybrid, LongPromptsBatchedEqualEachAloneAtAnyThreadCount) {
  RestoreSettings restore;
  TempDir dir;
  write_hybrid(make_hybrid(2, 31), dir.path());
  const std::vector<std::vector<int32_t>> seqs = {long_prompt(150, 1), long_prompt(75, 2), long_prompt(9, 3)};
  // Per call: (sequence, tokens); the calls of one sequence in order.
  const std::vector<std::vector<std::pair<int, int64_t>>> calls = {
      {{0, 100}, {1, 70}, {2, 4}},
      {{0, 1}, {1, 1}, {2, 5}},
      {{0, 49}, {1, 4}},
  };
  for (int64_t step : {256, 100, 7}) {
    LoadOptions lo;
    lo.prefill_chunk = step;
    auto lm = CausalLM::load(dir.path().string(), f32(), lo);
    const int64_t vocab = lm->vocab_size();
    std::vector<std::vector<float>> want;
    for (int threads : {1, 2}) {
      ThreadPool::set_global_threads(threads);
      // Alone: the same calls, one sequence at a time.
      std::vector<std::vector<float>> alone(seqs.size()), batched(seqs.size());
      for (size_t i = 0; i < seqs.size(); ++i) {
        SequenceState s = lm->new_sequence();
        alone[i].resize(seqs[i].size() * vocab);
        int64_t at = 0;
        for (const auto& call : calls)
          for (const auto& [seq, n] : call)
            if (seq == static_cast<int>(i)) {
              lm->forward(s, seqs[i].data() + at, n, LogitsMode::all, alone[i].data() + at * vocab);
              at += n;
            }
      }
      std::vector<SequenceState> states;
      for (size_t i = 0; i < seqs.size(); ++i) states.push_back(lm->new_sequence()), batched[i].resize(alone[i].size());
      std::vector<int64_t> at(seqs.size(), 0);
      for (const auto& call : calls) {
        std::vector<SequenceChunk> batch;
        for (const auto& [seq, n] : call) {
          batch.push_back({&states[seq], seqs[seq].data() + at[seq], n, LogitsMode::all,
                           batched[seq].data() + at[seq] * vocab});
          at[seq] += n;
        }
        lm->forward(batch);
      }
      for (size_t i = 0; i < seqs.size(); ++i)
        EXPECT_EQ(batched[i], alone[i]) << "sequence " << i << " step " << step << " threads " << threads;
      if (want.empty()) want = alone;
      else EXPECT_EQ(alone, want) << "1 vs 2 threads, step " << step;
    }
  }
}

}  // namespace
}  // namespace fp4lm::model
