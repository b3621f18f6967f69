// The two forms of the gated delta rule (kernels/delta_rule.h), on every registered variant,
// against each other and against the textbook recurrence in float64, on random inputs chosen to stress the chunked
// form: strongly negative log decays (down to -1e3 and -inf), β near 0 and near 1, repeated keys,
// lengths around the block size, blocks that start mid-way (pos0 not a multiple of 64), value
// heads per key head 1, 2 and 4, DK ≠ DV, and the state carried across calls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "kernels/delta_rule.h"

namespace fp4lm::kernels::delta_rule_test {
namespace {

// Rows of one key head and nv value heads laid out as the mixer does: per row q | k | v heads.
struct Case {
  int64_t n, dk, dv, nv;
  std::vector<float> qkv, g, beta;  // qkv [n][2·dk + nv·dv]; g, beta [n][nv]
  int64_t stride() const { return 2 * dk + nv * dv; }
};

Case make_case(int64_t n, int64_t dk, int64_t dv, int64_t nv, uint64_t seed) {
  Case c{n, dk, dv, nv, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  c.qkv.resize(static_cast<size_t>(n * c.stride()));
  for (float& x : c.qkv) x = normal(rng);
  for (int64_t t = 0; t < n; ++t) {
    float* row = c.qkv.data() + t * c.stride();
    if (t % 17 == 5 && t > 0) std::copy_n(row - c.stride() + dk, dk, row + dk);  // a repeated key
    for (int part = 0; part < 2; ++part) {  // q, k L2-normalized, q scaled by dk^-1/2 (as the mixer)
      float* x = row + part * dk;
      double ss = 0;
      for (int64_t i = 0; i < dk; ++i) ss += static_cast<double>(x[i]) * x[i];
      const float inv = static_cast<float>(1 / std::sqrt(ss + 1e-6)) * (part == 0 ? 1 / std::sqrt(float(dk)) : 1.0f);
      for (int64_t i = 0; i < dk; ++i) x[i] *= inv;
    }
    for (int64_t h = 0; h < nv; ++h) {
      float g = -std::exp(normal(rng)) * 0.3f;  // typical: e^g around 0.7 … 1
      float b = unit(rng);
      switch ((t * 7 + h * 3) % 11) {
        case 0: g = -30.0f - 10 * unit(rng); break;  // strongly negative: e^g underflows to ~0
        case 1: g = -1000.0f; break;
        case 2: g = -1e-7f; break;  // no decay at all
        case 3: b = 1e-4f * unit(rng); break;  // β near 0
        case 4: b = 1.0f - 1e-4f * unit(rng); break;  // β near 1
        default: break;
      }
      if (t == 77) g = -std::numeric_limits<float>::infinity();
      c.g.push_back(g);
      c.beta.push_back(b);
    }
  }
  return c;
}

DeltaRuleRows rows_of(Case& c, std::vector<float>& out, int64_t t0, int64_t n, int64_t pos0) {
  DeltaRuleRows r;
  r.n = n, r.pos0 = pos0, r.dk = c.dk, r.dv = c.dv, r.nv = c.nv;
  const float* row = c.qkv.data() + t0 * c.stride();
  r.q = row, r.k = row + c.dk, r.qk_stride = c.stride();
  r.v = row + 2 * c.dk, r.v_stride = c.stride();
  r.g = c.g.data() + t0 * c.nv, r.beta = c.beta.data() + t0 * c.nv, r.gb_stride = c.nv;
  r.o = out.data() + t0 * c.nv * c.dv, r.o_stride = c.nv * c.dv;
  return r;
}

// The recurrence in float64: outputs [n][nv·dv] and the final state [nv][dk][dv].
void reference(const Case& c, const std::vector<double>& s0, std::vector<double>& out, std::vector<double>& S) {
  S = s0;
  out.assign(static_cast<size_t>(c.n * c.nv * c.dv), 0.0);
  for (int64_t t = 0; t < c.n; ++t) {
    const float* row = c.qkv.data() + t * c.stride();
    const float *q = row, *k = row + c.dk;
    for (int64_t h = 0; h < c.nv; ++h) {
      const float* v = row + 2 * c.dk + h * c.dv;
      double* Sh = S.data() + h * c.dk * c.dv;
      const double e = std::exp(static_cast<double>(c.g[t * c.nv + h])), b = c.beta[t * c.nv + h];
      for (int64_t i = 0; i < c.dk * c.dv; ++i) Sh[i] *= e;
      for (int64_t col = 0; col < c.dv; ++col) {
        double stk = 0;
        for (int64_t i = 0; i < c.dk; ++i) stk += Sh[i * c.dv + col] * k[i];
        const double u = b * (v[col] - stk);
        double o = 0;
        for (int64_t i = 0; i < c.dk; ++i) o += (Sh[i * c.dv + col] += k[i] * u) * q[i];
        out[(t * c.nv + h) * c.dv + col] = o;
      }
    }
  }
}

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}
template <typename A>
double max_diff(const std::vector<float>& got, const A& want) {
  double d = 0;
  for (size_t i = 0; i < got.size(); ++i) d = std::max(d, std::abs(static_cast<double>(got[i]) - want[i]));
  return d;
}

// Runs one form of `kernel` over rows [0, n) in calls of `split` rows (0 = one call), from pos0.
std::vector<float> run(const DeltaRuleKernel& kernel, Case& c, bool chunked, std::vector<float>& S, int64_t pos0,
                       int64_t split = 0) {
  std::vector<float> out(static_cast<size_t>(c.n * c.nv * c.dv));
  for (int64_t t0 = 0; t0 < c.n;) {
    const int64_t n = split > 0 ? std::min(split, c.n - t0) : c.n;
    const DeltaRuleRows r = rows_of(c, out, t0, n, pos0 + t0);
    if (chunked) kernel.chunked(r, S.data());
    else kernel.recurrent(r, S.data());
    t0 += n;
  }
  return out;
}

struct Shape {
  int64_t n, dk, dv, nv, pos0;
};

// Every registered variant (kernels/delta_rule.cpp), by name; an unavailable one is skipped
// with its reason.
std::vector<std::string> variant_names() {
  std::vector<std::string> out;
  for (const DeltaRuleKernel* k : delta_rule_kernels()) out.push_back(k->name);
  return out;
}
const DeltaRuleKernel& variant(const std::string& name) {
  for (const DeltaRuleKernel* k : delta_rule_kernels())
    if (name == k->name) return *k;
  throw std::runtime_error("no delta-rule variant " + name);
}
#define SKIP_IF_UNAVAILABLE(k)                                                         \
  if (const std::string why = (k).unavailable_reason(); !why.empty()) GTEST_SKIP() << (k).name << ": " << why

class DeltaRuleForms : public ::testing::TestWithParam<std::tuple<std::string, Shape>> {};

// Chunked == recurrent == float64 to float32 rounding: outputs and final state within 2e-6 of
// the float64 reference's largest magnitude (measured: chunked vs recurrent ≤ 3e-7).
TEST_P(DeltaRuleForms, ChunkedEqualsRecurrentToFloat32Rounding) {
  const DeltaRuleKernel& k = variant(std::get<0>(GetParam()));
  SKIP_IF_UNAVAILABLE(k);
  const Shape p = std::get<1>(GetParam());
  Case c = make_case(p.n, p.dk, p.dv, p.nv, static_cast<uint64_t>(p.n * 131 + p.dk * 7 + p.nv));
  // A non-zero starting state, as after an earlier prefill.
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> s0(static_cast<size_t>(p.nv * p.dk * p.dv));
  for (float& x : s0) x = normal(rng);
  std::vector<double> want_out, want_S;
  reference(c, std::vector<double>(s0.begin(), s0.end()), want_out, want_S);
  const double out_scale = max_abs(want_out), s_scale = max_abs(want_S);

  std::vector<float> S_rec = s0, S_chk = s0;
  const std::vector<float> rec = run(k, c, false, S_rec, p.pos0);
  const std::vector<float> chk = run(k, c, true, S_chk, p.pos0);
  const std::string what = fmt::format("n {} dk {} dv {} nv {} pos0 {}", p.n, p.dk, p.dv, p.nv, p.pos0);
  EXPECT_LT(max_diff(rec, want_out) / out_scale, 2e-6) << what;
  EXPECT_LT(max_diff(chk, want_out) / out_scale, 2e-6) << what;
  EXPECT_LT(max_diff(S_rec, want_S) / s_scale, 2e-6) << what;
  EXPECT_LT(max_diff(S_chk, want_S) / s_scale, 2e-6) << what;
  EXPECT_LT(max_diff(chk, rec) / out_scale, 2e-6) << what;
  RecordProperty("chunked_vs_recurrent", fmt::format("{:.2e}", max_diff(chk, rec) / out_scale));

  // The state carries across calls of any size: 1-row steps, 13-row and 64-row calls.
  for (int64_t split : {1, 13, 64}) {
    std::vector<float> S = s0;
    const std::vector<float> got = run(k, c, true, S, p.pos0, split);
    EXPECT_LT(max_diff(got, want_out) / out_scale, 2e-6) << what << " split " << split;
    EXPECT_LT(max_diff(S, want_S) / s_scale, 2e-6) << what << " split " << split;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Variants, DeltaRuleForms,
    ::testing::Combine(::testing::ValuesIn(variant_names()),
                       ::testing::Values(Shape{1, 16, 24, 1, 0}, Shape{63, 16, 24, 2, 0}, Shape{64, 16, 24, 4, 0},
                                         Shape{65, 16, 24, 1, 0}, Shape{200, 16, 24, 2, 0}, Shape{200, 24, 8, 4, 37},
                                         Shape{130, 128, 128, 2, 0}, Shape{100, 32, 64, 1, 60})),
    [](const auto& info) {
      const Shape& s = std::get<1>(info.param);
      return fmt::format("{}_n{}_dk{}_dv{}_nv{}_pos{}", std::get<0>(info.param), s.n, s.dk, s.dv, s.nv, s.pos0);
    });

class DeltaRuleVariant : public ::testing::TestWithParam<std::string> {};

// A block's result depends only on its rows and the state before it: the same rows give the
// same bits whatever the call split, as long as the splits fall on block boundaries.
TEST_P(DeltaRuleVariant, SplitsAtBlockBoundariesAreBitIdentical) {
  const DeltaRuleKernel& k = variant(GetParam());
  SKIP_IF_UNAVAILABLE(k);
  Case c = make_case(200, 16, 24, 2, 9);
  std::vector<float> S1(static_cast<size_t>(2 * 16 * 24), 0.0f), S2 = S1;
  const std::vector<float> once = run(k, c, true, S1, 0);
  const std::vector<float> split = run(k, c, true, S2, 0, 64);
  EXPECT_EQ(once, split);
  EXPECT_EQ(S1, S2);
}

// The chunked form is really in use: on a long span it differs from the recurrent form in the
// last bits (a test that passed with both forms identical would prove nothing).
TEST_P(DeltaRuleVariant, ChunkedIsNotTheRecurrentFormInDisguise) {
  const DeltaRuleKernel& k = variant(GetParam());
  SKIP_IF_UNAVAILABLE(k);
  Case c = make_case(128, 16, 24, 2, 3);
  std::vector<float> S1(static_cast<size_t>(2 * 16 * 24), 0.0f), S2 = S1;
  EXPECT_NE(run(k, c, true, S1, 0), run(k, c, false, S2, 0));
}

// The variant the model runs is the first available one in the table.
TEST(DeltaRule, TheFirstAvailableVariantRuns) {
  for (const DeltaRuleKernel* k : delta_rule_kernels())
    if (k->unavailable_reason().empty()) {
      EXPECT_EQ(&delta_rule_kernel(), k) << k->name;
      return;
    }
  FAIL() << "no delta-rule variant is available (the reference always is)";
}

INSTANTIATE_TEST_SUITE_P(Variants, DeltaRuleVariant, ::testing::ValuesIn(variant_names()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace fp4lm::kernels::delta_rule_test
