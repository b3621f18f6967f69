// n / best_of's shared rules (engine/best_of.h): the server's choices and fp4lm.LLM's outputs.
#include <gtest/gtest.h>

#include <limits>

#include "engine/best_of.h"

namespace fp4lm::engine {
namespace {

TEST(BestOf, HighestCumulativeLogprobFirstTiesKeepTheEarlierSample) {
  EXPECT_EQ(best_of_order({-3.0, -1.0, -2.0, -1.0, -0.5}, 3), (std::vector<size_t>{4, 1, 3}));
  EXPECT_EQ(best_of_order({-1.0, -1.0, -1.0}, 2), (std::vector<size_t>{0, 1}));
  EXPECT_EQ(best_of_order({-2.0, -7.0}, 5), (std::vector<size_t>{0, 1}));  // fewer samples than n
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(best_of_order({-inf, -4.0}, 1), (std::vector<size_t>{1}));  // a -inf sample ranks last
  EXPECT_TRUE(best_of_order({}, 2).empty());
}

TEST(BestOf, SampleSeedsAreSeedPlusIndexWrapping) {
  EXPECT_EQ(sample_seed(7, 0), 7u);
  EXPECT_EQ(sample_seed(7, 3), 10u);
  EXPECT_EQ(sample_seed(std::numeric_limits<uint64_t>::max(), 2), 1u);
}

}  // namespace
}  // namespace fp4lm::engine
