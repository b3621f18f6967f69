// The Mamba-2 scan (kernels/ssm_scan.h), on every registered variant, against the recurrence in
// float64: state sizes that are and are not multiples of the vector width, head_dim 1 … 80, steps
// from tiny (no decay) to huge (the state forgotten at once), strided rows laid out as the mixer
// lays them out, and the state carried across calls of any size (decode = 1-row calls); the same
// for the chunked (SSD) form over a group of heads, with its chunk invariance.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "kernels/ssm_scan.h"

namespace fp4lm::kernels::ssm_scan_test {
namespace {

struct Shape {
  int64_t n, p, s;  // rows, head_dim, state size
};

// Rows as the mixer has them: per row x [p] | pad | B [s] | C [s] | pad, dt in its own array.
struct Case {
  Shape sh;
  int64_t stride;
  std::vector<float> rows, dt;
  float a, d;
};

Case make_case(const Shape& sh, uint64_t seed) {
  Case c{sh, sh.p + 2 * sh.s + 3, {}, {}, 0, 0};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  c.rows.resize(static_cast<size_t>(sh.n * c.stride));
  for (float& x : c.rows) x = normal(rng);
  for (int64_t t = 0; t < sh.n; ++t) {
    float dt = 0.01f + 0.3f * unit(rng);
    switch (t % 9) {
      case 3: dt = 1e-6f; break;     // no decay, almost no input
      case 5: dt = 40.0f; break;     // e^{dt·A} underflows: the state is replaced
      default: break;
    }
    c.dt.push_back(dt);
  }
  c.a = -std::exp(normal(rng) * 0.5f);
  c.d = normal(rng);
  return c;
}

SsmScanRows rows_of(const Case& c, std::vector<float>& y, int64_t t0, int64_t n) {
  SsmScanRows r;
  r.n = n, r.head_dim = c.sh.p, r.state = c.sh.s;
  const float* row = c.rows.data() + t0 * c.stride;
  r.x = row, r.x_stride = c.stride;
  r.b = row + c.sh.p + 1, r.c = row + c.sh.p + 1 + c.sh.s, r.bc_stride = c.stride;
  r.dt = c.dt.data() + t0, r.dt_stride = 1;
  r.a = c.a, r.d = c.d;
  r.y = y.data() + t0 * (c.sh.p + 2), r.y_stride = c.sh.p + 2;
  return r;
}

// S ← e^{dt·A}·S + dt·x ⊗ B;  y = S·C + D·x, in float64.
void reference(const Case& c, std::vector<double>& S, std::vector<double>& y) {
  const int64_t P = c.sh.p, N = c.sh.s;
  y.assign(static_cast<size_t>(c.sh.n * (P + 2)), 0.0);
  for (int64_t t = 0; t < c.sh.n; ++t) {
    const float* row = c.rows.data() + t * c.stride;
    const float *x = row, *B = row + P + 1, *C = row + P + 1 + N;
    const double dt = c.dt[static_cast<size_t>(t)], decay = std::exp(dt * c.a);
    for (int64_t p = 0; p < P; ++p) {
      double acc = 0;
      for (int64_t k = 0; k < N; ++k) {
        double& s = S[static_cast<size_t>(p * N + k)];
        s = s * decay + dt * x[p] * B[k];
        acc += s * C[k];
      }
      y[static_cast<size_t>(t * (P + 2) + p)] = acc + static_cast<double>(c.d) * x[p];
    }
  }
}

std::vector<std::string> variant_names() {
  std::vector<std::string> out;
  for (const SsmScanKernel* k : ssm_scan_kernels()) out.push_back(k->name);
  return out;
}
const SsmScanKernel& variant(const std::string& name) {
  for (const SsmScanKernel* k : ssm_scan_kernels())
    if (name == k->name) return *k;
  throw std::runtime_error("no ssm-scan variant " + name);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

class SsmScan : public ::testing::TestWithParam<std::tuple<std::string, Shape>> {};

// Outputs and final state within 2e-6 of the float64 recurrence's largest magnitude, from a
// non-zero state, in one call and in calls of 1, 7 and 64 rows; the padding between rows is
// never written.
TEST_P(SsmScan, MatchesFloat64Recurrence) {
  const SsmScanKernel& k = variant(std::get<0>(GetParam()));
  if (const std::string why = k.unavailable_reason(); !why.empty()) GTEST_SKIP() << k.name << ": " << why;
  const Shape sh = std::get<1>(GetParam());
  const Case c = make_case(sh, static_cast<uint64_t>(sh.n * 31 + sh.p * 7 + sh.s));
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> s0(static_cast<size_t>(sh.p * sh.s));
  for (float& x : s0) x = normal(rng);
  std::vector<double> want_S(s0.begin(), s0.end()), want_y;
  reference(c, want_S, want_y);
  const double y_scale = max_abs(want_y), s_scale = max_abs(want_S);
  for (int64_t split : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{64}}) {
    std::vector<float> S = s0, y(want_y.size(), -777.0f);
    for (int64_t t0 = 0; t0 < sh.n;) {
      const int64_t n = split > 0 ? std::min(split, sh.n - t0) : sh.n;
      k.scan(rows_of(c, y, t0, n), S.data());
      t0 += n;
    }
    double dy = 0, ds = 0;
    for (int64_t t = 0; t < sh.n; ++t)
      for (int64_t p = 0; p < sh.p + 2; ++p) {
        const size_t i = static_cast<size_t>(t * (sh.p + 2) + p);
        if (p >= sh.p) ASSERT_EQ(y[i], -777.0f) << "row " << t << " padding written";
        else dy = std::max(dy, std::abs(y[i] - want_y[i]));
      }
    for (size_t i = 0; i < S.size(); ++i) ds = std::max(ds, std::abs(S[i] - want_S[i]));
    EXPECT_LT(dy / y_scale, 2e-6) << "split " << split;
    EXPECT_LT(ds / s_scale, 2e-6) << "split " << split;
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, SsmScan,
                         ::testing::Combine(::testing::ValuesIn(variant_names()),
                                            ::testing::Values(Shape{1, 1, 1}, Shape{9, 3, 19}, Shape{40, 8, 16},
                                                              Shape{70, 5, 37}, Shape{33, 80, 128},
                                                              Shape{20, 64, 64})),
                         [](const auto& info) {
                           const Shape& s = std::get<1>(info.param);
                           return fmt::format("{}_n{}_p{}_s{}", std::get<0>(info.param), s.n, s.p, s.s);
                         });

// The chunked (SSD) form: a group of H heads sharing B and C, rows laid out as the mixer lays
// them out (x of every head | pad | B | C | pad; dt [n, H]).
struct GroupCase {
  int64_t n, heads, p, s, chunk;
  int64_t stride;
  std::vector<float> rows, dt, a, d;
};

GroupCase make_group(int64_t n, int64_t heads, int64_t p, int64_t s, int64_t chunk, uint64_t seed) {
  GroupCase c{n, heads, p, s, chunk, heads * p + 2 * s + 3, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  c.rows.resize(static_cast<size_t>(n * c.stride));
  for (float& x : c.rows) x = normal(rng);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      float dt = 0.01f + 0.3f * unit(rng);
      if ((t + h) % 9 == 3) dt = 1e-6f;  // no decay, almost no input
      if ((t + 2 * h) % 11 == 5) dt = 40.0f;  // the state forgotten at once
      c.dt.push_back(dt);
    }
  for (int64_t h = 0; h < heads; ++h) {
    c.a.push_back(-std::exp(normal(rng) * 0.5f));
    c.d.push_back(normal(rng));
  }
  return c;
}

SsdRows ssd_rows_of(const GroupCase& c, std::vector<float>& y, int64_t pos0, int64_t t0, int64_t n) {
  SsdRows r;
  r.n = n, r.pos0 = pos0 + t0, r.chunk = c.chunk;
  r.heads = c.heads, r.head_dim = c.p, r.state = c.s;
  const float* row = c.rows.data() + t0 * c.stride;
  r.x = row, r.x_stride = c.stride;
  r.b = row + c.heads * c.p + 1, r.c = row + c.heads * c.p + 1 + c.s, r.bc_stride = c.stride;
  r.dt = c.dt.data() + t0 * c.heads, r.dt_stride = c.heads;
  r.a = c.a.data(), r.d = c.d.data();
  const int64_t ys = c.heads * c.p + 2;
  r.y = y.data() + t0 * ys, r.y_stride = ys;
  return r;
}

// Every head's recurrence in float64: S [heads, P, N], y [n, heads·P + 2].
void group_reference(const GroupCase& c, std::vector<double>& S, std::vector<double>& y) {
  const int64_t P = c.p, N = c.s, ys = c.heads * P + 2;
  y.assign(static_cast<size_t>(c.n * ys), 0.0);
  for (int64_t t = 0; t < c.n; ++t) {
    const float* row = c.rows.data() + t * c.stride;
    const float *B = row + c.heads * P + 1, *C = B + N;
    for (int64_t h = 0; h < c.heads; ++h) {
      const float* x = row + h * P;
      const double dt = c.dt[static_cast<size_t>(t * c.heads + h)], decay = std::exp(dt * c.a[static_cast<size_t>(h)]);
      for (int64_t p = 0; p < P; ++p) {
        double acc = 0;
        for (int64_t k = 0; k < N; ++k) {
          double& s = S[static_cast<size_t>((h * P + p) * N + k)];
          s = s * decay + dt * x[p] * B[k];
          acc += s * C[k];
        }
        y[static_cast<size_t>(t * ys + h * P + p)] = acc + static_cast<double>(c.d[static_cast<size_t>(h)]) * x[p];
      }
    }
  }
}

struct GroupShape {
  int64_t n, heads, p, s, chunk, pos0;
};

class SsmScanChunked : public ::testing::TestWithParam<std::tuple<std::string, GroupShape>> {};

// The chunked form's outputs and final state within 2e-6 of the float64 recurrence's largest
// magnitude (the recurrent form's tolerance above), from a non-zero state, at an unaligned start,
// in one call and in calls of 1, 7 and chunk rows; calls cut at multiples of chunk positions give
// the one call's values bit for bit (blocks are aligned to positions); padding never written.
TEST_P(SsmScanChunked, MatchesFloat64RecurrenceAndIsChunkInvariant) {
  const SsmScanKernel& k = variant(std::get<0>(GetParam()));
  if (const std::string why = k.unavailable_reason(); !why.empty()) GTEST_SKIP() << k.name << ": " << why;
  const GroupShape sh = std::get<1>(GetParam());
  const GroupCase c = make_group(sh.n, sh.heads, sh.p, sh.s, sh.chunk, static_cast<uint64_t>(sh.n * 13 + sh.p));
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> s0(static_cast<size_t>(sh.heads * sh.p * sh.s));
  for (float& x : s0) x = normal(rng);
  std::vector<double> want_S(s0.begin(), s0.end()), want_y;
  group_reference(c, want_S, want_y);
  const double y_scale = max_abs(want_y), s_scale = max_abs(want_S);
  const int64_t ys = sh.heads * sh.p + 2;
  std::vector<float> one_y, one_S;
  // 0: one call; -1: calls cut at every multiple of chunk positions (the first one short).
  for (int64_t split : {int64_t{0}, int64_t{-1}, int64_t{1}, int64_t{7}, sh.chunk}) {
    std::vector<float> S = s0, y(want_y.size(), -777.0f);
    for (int64_t t0 = 0; t0 < sh.n;) {
      int64_t n = split > 0 ? split : sh.n;
      if (split < 0) n = sh.chunk - (sh.pos0 + t0) % sh.chunk;
      n = std::min(n, sh.n - t0);
      k.chunked(ssd_rows_of(c, y, sh.pos0, t0, n), S.data());
      t0 += n;
    }
    double dy = 0, ds = 0;
    for (int64_t t = 0; t < sh.n; ++t)
      for (int64_t p = 0; p < ys; ++p) {
        const size_t i = static_cast<size_t>(t * ys + p);
        if (p >= sh.heads * sh.p) ASSERT_EQ(y[i], -777.0f) << "row " << t << " padding written";
        else dy = std::max(dy, std::abs(y[i] - want_y[i]));
      }
    for (size_t i = 0; i < S.size(); ++i) ds = std::max(ds, std::abs(S[i] - want_S[i]));
    EXPECT_LT(dy / y_scale, 2e-6) << "split " << split;
    EXPECT_LT(ds / s_scale, 2e-6) << "split " << split;
    RecordProperty(fmt::format("split_{}_max_rel", split), fmt::format("{:.2e}", std::max(dy / y_scale, ds / s_scale)));
    if (split == 0) one_y = y, one_S = S;
    if (split == -1) {
      EXPECT_EQ(y, one_y) << "cut at chunk multiples";
      EXPECT_EQ(S, one_S) << "cut at chunk multiples";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, SsmScanChunked,
                         ::testing::Combine(::testing::ValuesIn(variant_names()),
                                            ::testing::Values(GroupShape{1, 1, 1, 1, 4, 0},
                                                              GroupShape{37, 2, 3, 19, 8, 5},
                                                              GroupShape{70, 3, 8, 16, 16, 9},
                                                              GroupShape{90, 1, 80, 128, 64, 30},
                                                              GroupShape{50, 2, 20, 37, 128, 3})),
                         [](const auto& info) {
                           const GroupShape& s = std::get<1>(info.param);
                           return fmt::format("{}_n{}_h{}_p{}_s{}_chunk{}", std::get<0>(info.param), s.n, s.heads, s.p,
                                              s.s, s.chunk);
                         });

// The variant that runs is the first available one, and the reference is always available.
TEST(SsmScanChoice, FirstAvailableVariantRuns) {
  const SsmScanKernel* first = nullptr;
  for (const SsmScanKernel* k : ssm_scan_kernels())
    if (!first && k->unavailable_reason().empty()) first = k;
  ASSERT_NE(first, nullptr);
  EXPECT_STREQ(ssm_scan_kernel().name, first->name);
  EXPECT_STREQ(ssm_scan_kernels().back()->name, "reference");
  EXPECT_EQ(ssm_scan_kernels().back()->unavailable_reason(), "");
}

}  // namespace
}  // namespace fp4lm::kernels::ssm_scan_test
