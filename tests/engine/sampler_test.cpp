// Sampling rules: greedy, seeded reproducibility, and each filter's effect.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "core/error.h"
#include "engine/sampler.h"

namespace fp4lm::engine::sampler_test {
namespace {

TEST(Sampler, GreedyTakesTheFirstMaximumAndSkipsNaN) {
  const float l[5] = {1.0f, NAN, 3.0f, 3.0f, -2.0f};
  EXPECT_EQ(argmax(l, 5), 2);
  Sampler s({});
  EXPECT_EQ(s.sample(l, 5), 2);
}

std::vector<float> logits_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::map<int32_t, int> histogram(SamplingParams p, const std::vector<float>& l, int n) {
  Sampler s(p);
  std::map<int32_t, int> h;
  for (int i = 0; i < n; ++i) ++h[s.sample(l.data(), static_cast<int64_t>(l.size()))];
  return h;
}

TEST(Sampler, SameSeedSameSequenceOtherSeedOtherSequence) {
  const auto l = logits_of({0.1, 0.2, 0.3, 0.4});
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 42;
  Sampler a(p), b(p);
  p.seed = 43;
  Sampler c(p);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 64; ++i) {
    sa.push_back(a.sample(l.data(), 4));
    sb.push_back(b.sample(l.data(), 4));
    sc.push_back(c.sample(l.data(), 4));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(Sampler, TemperatureOneFollowsTheDistribution) {
  SamplingParams p;
  p.temperature = 1.0;
  p.seed = 7;
  auto h = histogram(p, logits_of({0.1, 0.2, 0.3, 0.4}), 20000);
  // Fixed seed: deterministic; the bounds are ~6 standard deviations wide.
  EXPECT_NEAR(h[0] / 20000.0, 0.1, 0.013);
  EXPECT_NEAR(h[1] / 20000.0, 0.2, 0.017);
  EXPECT_NEAR(h[2] / 20000.0, 0.3, 0.02);
  EXPECT_NEAR(h[3] / 20000.0, 0.4, 0.021);
}

TEST(Sampler, LowTemperatureSharpensHighFlattens) {
  SamplingParams p;
  p.seed = 1;
  p.temperature = 0.1;
  auto sharp = histogram(p, logits_of({0.3, 0.7}), 2000);
  EXPECT_GT(sharp[1], 1990);  // (0.7/0.3)^10 ≈ 4700 : 1
  p.temperature = 100.0;
  auto flat = histogram(p, logits_of({0.3, 0.7}), 4000);
  EXPECT_NEAR(flat[0] / 4000.0, 0.5, 0.05);
}

TEST(Sampler, TopKKeepsOnlyTheKMostProbable) {
  SamplingParams p;
  p.temperature = 1.0;
  p.top_k = 2;
  auto h = histogram(p, logits_of({0.25, 0.15, 0.35, 0.25}), 4000);
  EXPECT_EQ(h.count(1), 0u);
  EXPECT_EQ(h.count(3), 0u);  // tie 0.25 vs 0.25: the lower id (0) is kept
  EXPECT_EQ(h[0] + h[2], 4000);
  EXPECT_NEAR(h[2] / 4000.0, 0.35 / 0.6, 0.04);
  p.top_k = 1;
  EXPECT_EQ(histogram(p, logits_of({0.25, 0.15, 0.35, 0.25}), 100)[2], 100);
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  SamplingParams p;
  p.temperature = 1.0;
  p.top_p = 0.6;  // 0.4 + 0.3 reaches 0.6: ids 3 and 2 remain
  auto h = histogram(p, logits_of({0.1, 0.2, 0.3, 0.4}), 4000);
  EXPECT_EQ(h.count(0) + h.count(1), 0u);
  EXPECT_NEAR(h[3] / 4000.0, 0.4 / 0.7, 0.04);
}

TEST(Sampler, MinPDropsTokensBelowAFractionOfTheTop) {
  SamplingParams p;
  p.temperature = 1.0;
  p.min_p = 0.45;  // threshold 0.18: ids 1 (0.2), 2, 3 remain
  auto h = histogram(p, logits_of({0.1, 0.2, 0.3, 0.4}), 4000);
  EXPECT_EQ(h.count(0), 0u);
  EXPECT_NEAR(h[1] / 4000.0, 0.2 / 0.9, 0.04);
  p.min_p = 1.0;
  EXPECT_EQ(histogram(p, logits_of({0.1, 0.2, 0.3, 0.4}), 100)[3], 100);
}

TEST(Sampler, RejectsOutOfRangeParameters) {
  SamplingParams p;
  p.temperature = -1;
  EXPECT_THROW(validate(p), UsageError);
  p = {};
  p.top_p = 0;
  EXPECT_THROW(validate(p), UsageError);
  p = {};
  p.min_p = 1.5;
  EXPECT_THROW(validate(p), UsageError);
  p = {};
  p.top_k = -3;
  EXPECT_THROW(Sampler{p}, UsageError);
}

}  // namespace
}  // namespace fp4lm::engine::sampler_test
