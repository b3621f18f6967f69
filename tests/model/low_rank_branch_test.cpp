// SVDQuant's low-rank branch (model/layers/low_rank_branch.h): y += (x · Aᵀ) · Bᵀ per shard, each product
// rounded to the activation dtype as a 16-bit layer's two F.linear calls are.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/layers/low_rank_branch.h"

namespace fp4lm::model {
namespace {

TEST(LowRankBranch, AddsEachShardsProductToItsRows) {
  LowRankBranch b;
  b.k = 3;
  b.n = 3;
  // Shard 0: rows 0..1, rank 1; shard 1: row 2, rank 2.
  b.parts.push_back({"q", 0, 2, 1, {1.0f, 2.0f, 3.0f}, {0.5f, -1.0f}});
  b.parts.push_back({"k", 2, 1, 2, {1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f}, {2.0f, 10.0f}});
  const std::vector<float> x = {1.0f, 1.0f, 1.0f, 2.0f, 0.0f, -1.0f};  // two tokens
  std::vector<float> y = {1.0f, 1.0f, 1.0f, 0.0f, 0.0f, 0.0f};
  b.add_to(x.data(), 2, y.data(), DType::F32);
  // token 0: t0 = 6 -> rows 3, -6; t1 = (1, 1) -> 2 + 10 = 12. token 1: t0 = 2 - 3 = -1 -> -0.5, 1;
  // t1 = (2, -1) -> 4 - 10 = -6.
  EXPECT_EQ(y, (std::vector<float>{4.0f, -5.0f, 13.0f, -0.5f, 1.0f, -6.0f}));
}

TEST(LowRankBranch, SixteenBitLayersRoundEachProduct) {
  LowRankBranch b;
  b.k = 1;
  b.n = 1;
  b.parts.push_back({"q", 0, 1, 1, {1.0f + 1.0f / 1024}, {1.0f}});
  const float x = 1.0f;
  float y32 = 0.0f, y16 = 0.0f;
  b.add_to(&x, 1, &y32, DType::F32);
  b.add_to(&x, 1, &y16, DType::BF16);
  EXPECT_EQ(y32, 1.0f + 1.0f / 1024);
  EXPECT_EQ(y16, 1.0f);  // x·Aᵀ rounded to bf16 (8 significant bits) before the second product
}

}  // namespace
}  // namespace fp4lm::model
