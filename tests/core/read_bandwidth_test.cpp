// The read-bandwidth probe (the baseline of `fp4lm bench kernels` and decode_bench): a positive,
// finite rate for any buffer size and thread count. Not a timing test: the lower bound is 1 MB/s,
// far below what any machine reads from its caches, so only a broken probe (0, NaN, inf) fails.
#include "core/read_bandwidth.h"

#include <gtest/gtest.h>

#include <cmath>

namespace fp4lm::read_bandwidth_test {
namespace {

TEST(ReadBandwidth, PositiveAndFiniteForEveryBufferSizeAndThreadCount) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (size_t bytes : {size_t{0}, size_t{100}, size_t{32768}, size_t{3} << 20}) {
      const double bw = read_bandwidth(bytes, 2, pool);
      EXPECT_TRUE(std::isfinite(bw)) << bytes << " bytes, " << threads << " threads";
      EXPECT_GT(bw, 1e6) << bytes << " bytes, " << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace fp4lm::read_bandwidth_test
