// The MoE expert activation parameter (kernels/expert_activation.h): each form against its float64
// formula (silu bit for bit the expression the kernels always used), and every MoE backend that runs
// dense or MXFP4 experts with gpt-oss's setting — biases on both projections, clamped SwiGLU on
// interleaved gate/up — against a float64 per-token loop over the chosen experts; attention sinks
// (kernels/attention.h) on every attention variant against float64.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "kernels/attention.h"
#include "kernels/expert_activation.h"
#include "kernel_test_support.h"
#include "quant/mxfp4.h"

namespace fp4lm::kernels::moe_activation_test {
namespace {

using Gate = ExpertActivation::Gate;

double f64_act(const ExpertActivation& a, double g, double u) {
  switch (a.gate) {
    case Gate::silu: return g / (1 + std::exp(-g)) * u;
    case Gate::gelu_tanh: return 0.5 * g * (1 + std::tanh(std::sqrt(2 / M_PI) * (g + 0.044715 * g * g * g))) * u;
    case Gate::clamped_swiglu: {
      g = std::min(g, static_cast<double>(a.limit));
      u = std::clamp(u, -static_cast<double>(a.limit), static_cast<double>(a.limit));
      return (u + 1) * g / (1 + std::exp(-a.alpha * g));
    }
    case Gate::clamped_silu: {
      g = std::min(g, static_cast<double>(a.limit));
      u = std::clamp(u, -static_cast<double>(a.limit), static_cast<double>(a.limit));
      return g / (1 + std::exp(-g)) * u;
    }
  }
  return NAN;
}

TEST(MoeActivation, EachFormMatchesItsFloat64Formula) {
  const int64_t inter = 40;
  std::mt19937 rng(3);
  std::normal_distribution<float> d(0.0f, 5.0f);  // beyond ±7 often: the clamps matter
  std::vector<float> h13(2 * inter), out(inter);
  for (float& x : h13) x = d(rng);
  h13[0] = 30.0f, h13[1] = -30.0f;  // gate above the limit, up below it (both layouts' columns)
  h13[inter] = 12.0f;
  for (Gate gate : {Gate::silu, Gate::gelu_tanh, Gate::clamped_swiglu, Gate::clamped_silu})
    for (bool interleaved : {false, true}) {
      const ExpertActivation a{gate, interleaved, 1.702f, 7.0f};
      apply_expert_activation(a, h13.data(), inter, out.data());
      for (int64_t c = 0; c < inter; ++c) {
        const double g = interleaved ? h13[2 * c] : h13[c], u = interleaved ? h13[2 * c + 1] : h13[inter + c];
        const double want = f64_act(a, g, u);
        EXPECT_NEAR(out[c], want, 1e-6 * (1 + std::fabs(want))) << expert_activation_name(a) << " column " << c;
      }
    }
  // The default is what the MoE kernels computed before the parameter existed, bit for bit.
  apply_expert_activation({}, h13.data(), inter, out.data());
  for (int64_t c = 0; c < inter; ++c) {
    const float g = h13[c];
    const float want = g / (1.0f + std::exp(-g)) * h13[inter + c];
    EXPECT_EQ(std::memcmp(&out[c], &want, 4), 0) << c;
  }
  // gpt-oss's clamp: the gate saturates at limit, the up at ±limit.
  const ExpertActivation oss{Gate::clamped_swiglu, true, 1.702f, 7.0f};
  const float sat[4] = {100.0f, 100.0f, 7.0f, 7.0f};
  float o[2];
  apply_expert_activation(oss, sat, 2, o);
  EXPECT_EQ(o[0], o[1]);
  EXPECT_NEAR(o[0], 8.0 * 7.0 / (1 + std::exp(-1.702 * 7.0)), 1e-5);
  // DeepSeek-V4's: the same saturation, silu(limit) · limit, without gpt-oss's alpha and + 1.
  apply_expert_activation({Gate::clamped_silu, true, 1.702f, 7.0f}, sat, 2, o);
  EXPECT_EQ(o[0], o[1]);
  EXPECT_NEAR(o[0], 7.0 * 7.0 / (1 + std::exp(-7.0)), 1e-5);
}

// An expert layer of `experts` experts in float32 (or MXFP4 codes), with biases.
struct Experts {
  int64_t experts = 0, hidden = 0, inter = 0;
  std::vector<float> w13, w2, b13, b2;       // dense [E][2I][D], [E][D][I]; biases [E][2I], [E][D]
  std::vector<uint8_t> c13, s13, c2, s2;     // MXFP4 codes / E8M0 scales of the same shapes
  bool mxfp4 = false;

  MoeWeights weights() const {
    MoeWeights mw;
    mw.key = mxfp4 ? kMxfp4W4A16 : kUnquantized;
    mw.num_experts = experts;
    mw.hidden = hidden;
    mw.inter = inter;
    for (int64_t e = 0; e < experts; ++e) {
      auto lin = [&](int64_t n, int64_t k, const std::vector<float>& w, const std::vector<uint8_t>& c,
                     const std::vector<uint8_t>& s, const std::vector<float>& b, const char* name) {
        LinearWeights l;
        l.key = mw.key;
        l.n = n;
        l.k = k;
        ShardView v = mxfp4 ? ShardView(Mxfp4View{c.data() + e * n * k / 2, s.data() + e * n * k / 32})
                            : ShardView(DenseView{DType::F32, w.data() + e * n * k});
        l.shards.push_back({std::string(name) + std::to_string(e), n, v});
        l.bias.assign(b.begin() + e * n, b.begin() + (e + 1) * n);
        return l;
      };
      mw.w13.push_back(lin(2 * inter, hidden, w13, c13, s13, b13, "w13."));
      mw.w2.push_back(lin(hidden, inter, w2, c2, s2, b2, "w2."));
    }
    return mw;
  }
};

Experts make_experts(int64_t experts, int64_t hidden, int64_t inter, bool mxfp4, uint32_t seed) {
  Experts x;
  x.experts = experts;
  x.hidden = hidden;
  x.inter = inter;
  x.mxfp4 = mxfp4;
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  auto fill = [&](int64_t n, int64_t k, std::vector<float>& w, std::vector<uint8_t>& c, std::vector<uint8_t>& s) {
    const size_t count = static_cast<size_t>(experts * n * k);
    if (mxfp4) {
      c.resize(count / 2);
      s.resize(count / 32);
      for (auto& b : c) b = static_cast<uint8_t>(rng());
      for (auto& b : s) b = static_cast<uint8_t>(124 + rng() % 3);
      w = quant::dequantize_mxfp4(c.data(), s.data(), experts * n, k);
    } else {
      w.resize(count);
      for (float& v : w) v = d(rng) * 2.0f / std::sqrt(static_cast<float>(k));
    }
  };
  fill(2 * inter, hidden, x.w13, x.c13, x.s13);
  fill(hidden, inter, x.w2, x.c2, x.s2);
  for (auto* b : {&x.b13, &x.b2}) {
    b->resize(b == &x.b13 ? static_cast<size_t>(experts * 2 * inter) : static_cast<size_t>(experts * hidden));
    for (float& v : *b) v = d(rng) * 0.5f;
  }
  return x;
}

std::vector<double> f64_moe(const Experts& x, const ExpertActivation& a, const std::vector<float>& in, int64_t m,
                            const std::vector<int32_t>& ids, const std::vector<float>& wts, int64_t top_k) {
  const int64_t D = x.hidden, I = x.inter;
  std::vector<double> y(static_cast<size_t>(m * D), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t e = ids[i * top_k + j];
      std::vector<double> h(2 * I), mid(I);
      for (int64_t r = 0; r < 2 * I; ++r) {
        double acc = x.b13[e * 2 * I + r];
        for (int64_t c = 0; c < D; ++c) acc += static_cast<double>(x.w13[(e * 2 * I + r) * D + c]) * in[i * D + c];
        h[r] = acc;
      }
      for (int64_t c = 0; c < I; ++c)
        mid[c] = a.interleaved ? f64_act(a, h[2 * c], h[2 * c + 1]) : f64_act(a, h[c], h[I + c]);
      for (int64_t r = 0; r < D; ++r) {
        double acc = x.b2[e * D + r];
        for (int64_t c = 0; c < I; ++c) acc += static_cast<double>(x.w2[(e * D + r) * I + c]) * mid[c];
        y[i * D + r] += wts[i * top_k + j] * acc;
      }
    }
  return y;
}

class GptOssExpertsBackend : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(GptOssExpertsBackend, BiasesAndClampedSwigluMatchFloat64) {
  const auto& [name, mxfp4] = GetParam();
  if (std::string why = testing::unavailable(name, LayerKind::moe); !why.empty()) GTEST_SKIP() << name << ": " << why;
  const Backend* b = find_backend(name, LayerKind::moe);
  const int64_t experts = 5, hidden = 64, inter = 32, top_k = 2, m = 7;
  const Experts x = make_experts(experts, hidden, inter, mxfp4, 11);
  const ExpertActivation act{Gate::clamped_swiglu, true, 1.702f, 7.0f};
  MoeProblem p{x.weights().key, DType::F32, experts, top_k, hidden, inter, {}, act};
  auto kernel = b->make_moe(x.weights(), p);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.5f);
  std::vector<float> in(static_cast<size_t>(m * hidden)), y(in.size());
  for (float& v : in) v = d(rng);
  const testing::Top2Routing routing = testing::top2_routing(m, experts);
  const std::vector<int32_t>& ids = routing.ids;
  const std::vector<float>& wts = routing.weights;
  kernel->forward(in.data(), m, ids.data(), wts.data(), top_k, y.data(), ThreadPool::global());
  const std::vector<double> want = f64_moe(x, act, in, m, ids, wts, top_k);
  double scale = 0;
  for (double v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 2e-5 * scale) << name << " element " << i;
  // Without the parameter the same weights give plain SwiGLU: a different answer.
  MoeProblem plain = p;
  plain.activation = {};
  std::vector<float> y2(y.size());
  b->make_moe(x.weights(), plain)->forward(in.data(), m, ids.data(), wts.data(), top_k, y2.data(), ThreadPool::global());
  EXPECT_NE(0, std::memcmp(y.data(), y2.data(), y.size() * sizeof(float)));
}

std::vector<std::tuple<std::string, bool>> moe_backend_formats() {
  std::vector<std::tuple<std::string, bool>> out;
  for (const Backend* b : backends(LayerKind::moe))
    for (bool mx : {false, true})
      if (b->supports(mx ? kMxfp4W4A16 : kUnquantized)) out.emplace_back(b->name, mx);
  return out;
}

INSTANTIATE_TEST_SUITE_P(All, GptOssExpertsBackend, ::testing::ValuesIn(moe_backend_formats()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_mxfp4" : "_dense");
                         });

// Attention sinks: each head's sink logit joins the max and the softmax denominator only. Every
// variant against float64, sinks from far below to far above the scores (a sink of +30 leaves the
// output near 0), decode and prefill rows, groups over one head block; split calls (one row, one
// head at a time, the sink pointer offset with the head) give the same bits.
TEST(AttentionSinks, EveryVariantMatchesFloat64AndSplitsChangeNoBit) {
  const int64_t hd = 24, group = 10, pos0 = 37, rows = 3, len = pos0 + rows;
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> keys(static_cast<size_t>(len * hd)), values(keys.size()), q(static_cast<size_t>(rows * group * hd));
  for (auto* v : {&keys, &values, &q})
    for (float& x : *v) x = d(rng);
  const std::vector<float> sinks = {-30.0f, -2.0f, 0.0f, 0.5f, 1.0f, 2.0f, 4.0f, 8.0f, 30.0f, -0.25f};
  for (const AttentionKernel* k : attention_kernels()) {
    if (!k->unavailable_reason().empty()) continue;
    AttentionCall c;
    std::vector<float> out(q.size()), split(q.size());
    c.q = q.data();
    c.q_stride = group * hd;
    c.out = out.data();
    c.out_stride = group * hd;
    c.rows = rows;
    c.pos0 = pos0;
    c.group = group;
    c.head_dim = hd;
    c.kv_dtype = DType::F32;
    c.keys = reinterpret_cast<const uint8_t*>(keys.data());
    c.values = reinterpret_cast<const uint8_t*>(values.data());
    c.sinks = sinks.data();
    run_attention(*k, c);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < group; ++j) {
        const int64_t n = pos0 + i + 1;
        std::vector<double> s(static_cast<size_t>(n));
        double mx = sinks[j];
        for (int64_t t = 0; t < n; ++t) {
          double dot = 0;
          for (int64_t e = 0; e < hd; ++e) dot += static_cast<double>(q[(i * group + j) * hd + e]) * keys[t * hd + e];
          s[t] = dot / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, s[t]);
        }
        double sum = std::exp(sinks[j] - mx);
        for (double& x : s) sum += x = std::exp(x - mx);
        for (int64_t e = 0; e < hd; ++e) {
          double o = 0;
          for (int64_t t = 0; t < n; ++t) o += s[t] * values[t * hd + e];
          o /= sum;
          EXPECT_NEAR(out[(i * group + j) * hd + e], o, 2e-5) << k->name << " row " << i << " head " << j;
        }
        AttentionCall one = c;
        one.rows = 1;
        one.pos0 = pos0 + i;
        one.group = 1;
        one.q = q.data() + (i * group + j) * hd;
        one.out = split.data() + (i * group + j) * hd;
        one.sinks = sinks.data() + j;
        run_attention(*k, one);
      }
    EXPECT_EQ(0, std::memcmp(out.data(), split.data(), out.size() * sizeof(float))) << k->name;
    // A sink far above every score takes the whole weight: the output is (near) zero.
    for (int64_t e = 0; e < hd; ++e) EXPECT_LT(std::fabs(out[8 * hd + e]), 1e-8) << k->name;
  }
}

}  // namespace
}  // namespace fp4lm::kernels::moe_activation_test
