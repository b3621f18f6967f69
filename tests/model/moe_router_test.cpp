// Softmax top-k routing against a hand computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "model/layers/moe_router.h"

namespace fp4lm::model::moe_router_test {
namespace {

TEST(MoeRouter, SoftmaxTopKInDescendingOrder) {
  const float logits[2 * 4] = {0.1f, 2.0f, -1.0f, 1.0f, 3.0f, 3.5f, 0.0f, -2.0f};
  int32_t ids[4];
  float w[4];
  route_topk(logits, 2, 4, 2, /*renormalize=*/false, DType::F32, ids, w);
  const double z0 = std::exp(0.1) + std::exp(2.0) + std::exp(-1.0) + std::exp(1.0);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_NEAR(w[0], std::exp(2.0) / z0, 1e-6);
  EXPECT_NEAR(w[1], std::exp(1.0) / z0, 1e-6);
  EXPECT_EQ(ids[2], 1);
  EXPECT_EQ(ids[3], 0);
}

TEST(MoeRouter, RenormalizedWeightsSumToOne) {
  const float logits[5] = {0.3f, -0.2f, 1.7f, 0.9f, 0.0f};
  int32_t ids[3];
  float w[3];
  route_topk(logits, 1, 5, 3, /*renormalize=*/true, DType::F32, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(ids[2], 0);
  EXPECT_NEAR(w[0] + w[1] + w[2], 1.0, 1e-6);
  const double z = std::exp(1.7) + std::exp(0.9) + std::exp(0.3);
  EXPECT_NEAR(w[0], std::exp(1.7) / z, 1e-6);
}

TEST(MoeRouter, TiesGoToTheLowerExpertId) {
  const float logits[4] = {1.0f, 2.0f, 2.0f, 2.0f};
  int32_t ids[2];
  float w[2];
  route_topk(logits, 1, 4, 2, true, DType::F32, ids, w);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 2);
  EXPECT_FLOAT_EQ(w[0], 0.5f);
}

TEST(MoeRouter, WeightsAreRoundedToTheActivationDtype) {
  const float logits[3] = {0.123f, 0.456f, -0.789f};
  int32_t ids[2];
  float w[2];
  route_topk(logits, 1, 3, 2, false, DType::BF16, ids, w);
  for (float x : w) EXPECT_EQ(x, bf16_to_f32(f32_to_bf16(x)));
}

TEST(MoeRouter, RejectsTopKOutOfRange) {
  const float logits[2] = {0, 0};
  int32_t ids[3];
  float w[3];
  EXPECT_THROW(route_topk(logits, 1, 2, 3, false, DType::F32, ids, w), Error);
  EXPECT_THROW(route_topk(logits, 1, 2, 0, false, DType::F32, ids, w), Error);
}

}  // namespace
}  // namespace fp4lm::model::moe_router_test

// DeepSeek-style routing against a float64 reference written from HF's DeepseekV3TopkRouter:
// group scores = sum of each group's two best biased scores, the topk_group best groups kept
// (others -inf), top_k of the biased scores, weights = unbiased scores (renormalized with
// +1e-20) × routed_scaling_factor.
namespace fp4lm::model::moe_router_test {
namespace {

struct RefRoute {
  std::vector<int32_t> ids;
  std::vector<double> weights;
};

RefRoute sigmoid_reference(const std::vector<float>& logits, const std::vector<float>& bias, int64_t k,
                           const SigmoidRouting& r) {
  const int64_t e_n = static_cast<int64_t>(logits.size()), per = e_n / r.n_group;
  std::vector<double> score(e_n), choice(e_n);
  for (int64_t e = 0; e < e_n; ++e) {
    score[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(logits[e])));
    choice[e] = score[e] + (bias.empty() ? 0.0 : bias[e]);
  }
  std::vector<std::pair<double, int64_t>> groups;
  for (int64_t g = 0; g < r.n_group; ++g) {
    std::vector<double> v(choice.begin() + g * per, choice.begin() + (g + 1) * per);
    std::sort(v.rbegin(), v.rend());
    groups.push_back({-(v[0] + (per > 1 ? v[1] : 0.0)), g});
  }
  std::sort(groups.begin(), groups.end());
  std::vector<double> masked(e_n, -INFINITY);
  for (int64_t j = 0; j < r.topk_group; ++j)
    for (int64_t e = groups[j].second * per; e < (groups[j].second + 1) * per; ++e) masked[e] = choice[e];
  std::vector<std::pair<double, int32_t>> order;
  for (int64_t e = 0; e < e_n; ++e) order.push_back({-masked[e], static_cast<int32_t>(e)});
  std::sort(order.begin(), order.end());
  RefRoute out;
  double total = 0;
  for (int64_t j = 0; j < k; ++j) total += score[order[j].second];
  for (int64_t j = 0; j < k; ++j) {
    out.ids.push_back(order[j].second);
    const double w = r.renormalize ? score[order[j].second] / (total + 1e-20) : score[order[j].second];
    out.weights.push_back(w * r.scaling);
  }
  return out;
}

TEST(SigmoidRouter, MatchesTheFloat64ReferenceWithGroupsBiasScalingAndRenormalization) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n(0.0f, 1.5f);
  struct Case {
    int64_t experts, k;
    SigmoidRouting rule;
    bool bias;
  };
  const Case cases[] = {
      {16, 4, {.n_group = 4, .topk_group = 2, .renormalize = true, .scaling = 2.5}, true},   // DeepSeek-V3 shape
      {16, 4, {.n_group = 4, .topk_group = 2, .renormalize = false, .scaling = 1.0}, true},
      {12, 3, {.n_group = 1, .topk_group = 1, .renormalize = true, .scaling = 2.827}, true},  // Kimi K2: one group
      {8, 2, {.n_group = 1, .topk_group = 1, .renormalize = true, .scaling = 1.0}, false},   // no bias
      {32, 8, {.n_group = 8, .topk_group = 4, .renormalize = true, .scaling = 1.8}, true},
  };
  for (const Case& c : cases) {
    const int64_t m = 9;
    std::vector<float> logits(static_cast<size_t>(m * c.experts)), bias;
    for (float& v : logits) v = n(rng);
    if (c.bias) {
      bias.resize(static_cast<size_t>(c.experts));
      for (float& v : bias) v = 0.3f * n(rng);  // some negative: the -inf mask must still win
    }
    std::vector<int32_t> ids(static_cast<size_t>(m * c.k));
    std::vector<float> w(ids.size());
    route_sigmoid_topk(logits.data(), c.bias ? bias.data() : nullptr, m, c.experts, c.k, c.rule, DType::F32,
                       ids.data(), w.data());
    for (int64_t i = 0; i < m; ++i) {
      std::vector<float> row(logits.begin() + i * c.experts, logits.begin() + (i + 1) * c.experts);
      RefRoute ref = sigmoid_reference(row, bias, c.k, c.rule);
      for (int64_t j = 0; j < c.k; ++j) {
        EXPECT_EQ(ids[i * c.k + j], ref.ids[j]) << "row " << i << " slot " << j << " experts " << c.experts;
        EXPECT_NEAR(w[i * c.k + j], ref.weights[j], 2e-6 * c.rule.scaling) << "row " << i << " slot " << j;
      }
    }
  }
}

TEST(SigmoidRouter, BiasChoosesButTheUnbiasedScoresWeigh) {
  // Expert 0 has the best score, but expert 2's bias lifts it above: 2 and 1 are chosen, and
  // their weights are sigmoid(logit) alone.
  const float logits[4] = {2.0f, 1.0f, 0.0f, -1.0f};
  const float bias[4] = {0.0f, 0.3f, 1.0f, 0.0f};
  int32_t ids[2];
  float w[2];
  route_sigmoid_topk(logits, bias, 1, 4, 2, {.renormalize = false}, DType::F32, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 1);
  EXPECT_NEAR(w[0], 0.5, 1e-7);
  EXPECT_NEAR(w[1], 1.0 / (1.0 + std::exp(-1.0)), 1e-7);
}

TEST(SigmoidRouter, GroupLimitExcludesTheBestExpertOfALosingGroup) {
  // Groups {0,1}, {2,3}: group 0 has the single best expert (3.0) but its pair sums lower than
  // group 1's (1.5 + 1.4); with topk_group 1 only group 1's experts are chosen.
  const float logits[4] = {3.0f, -3.0f, 1.5f, 1.4f};
  int32_t ids[2];
  float w[2];
  route_sigmoid_topk(logits, nullptr, 1, 4, 2, {.n_group = 2, .topk_group = 1, .renormalize = true, .scaling = 2.0},
                     DType::F32, ids, w);
  EXPECT_EQ(ids[0], 2);
  EXPECT_EQ(ids[1], 3);
  const double s2 = 1 / (1 + std::exp(-1.5)), s3 = 1 / (1 + std::exp(-1.4));
  EXPECT_NEAR(w[0], 2.0 * s2 / (s2 + s3), 1e-6);
  EXPECT_NEAR(w[0] + w[1], 2.0, 1e-6);
}

TEST(SigmoidRouter, WeightsRoundToTheAskedDtype) {
  const float logits[3] = {0.123f, 0.456f, -0.789f};
  int32_t ids[2];
  float w[2];
  route_sigmoid_topk(logits, nullptr, 1, 3, 2, {}, DType::BF16, ids, w);
  for (float x : w) EXPECT_EQ(x, bf16_to_f32(f32_to_bf16(x)));
}

TEST(SigmoidRouter, RejectsGroupsThatDoNotFit) {
  const float logits[8] = {};
  int32_t ids[8];
  float w[8];
  EXPECT_THROW(route_sigmoid_topk(logits, nullptr, 1, 8, 2, {.n_group = 3, .topk_group = 1}, DType::F32, ids, w),
               Error);  // 3 does not divide 8
  EXPECT_THROW(route_sigmoid_topk(logits, nullptr, 1, 8, 2, {.n_group = 8, .topk_group = 2}, DType::F32, ids, w),
               Error);  // groups of one expert
  EXPECT_THROW(route_sigmoid_topk(logits, nullptr, 1, 8, 5, {.n_group = 4, .topk_group = 2}, DType::F32, ids, w),
               Error);  // top_k 5 > 2 groups × 2 experts
  EXPECT_THROW(route_sigmoid_topk(logits, nullptr, 1, 8, 2, {.n_group = 4, .topk_group = 5}, DType::F32, ids, w),
               Error);
}

}  // namespace
}  // namespace fp4lm::model::moe_router_test
