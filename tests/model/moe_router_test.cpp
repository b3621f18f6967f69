// Softmax top-k routing against a hand computation.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "model/moe_router.h"

namespace fp4lm::model {
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
}  // namespace fp4lm::model
