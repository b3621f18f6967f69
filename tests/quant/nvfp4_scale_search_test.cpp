// The searched NVFP4 block scale (quant/nvfp4_scale_search.h) against the amax/6 rule it replaces:
// never a larger block error, often a smaller one, and a result that dequantizes to exactly the
// error it was chosen for (codes and scale agree).
#include "quant/nvfp4_scale_search.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace fp4lm::quant::nvfp4_scale_search_test {
namespace {

// n x k weights, normal with a few outliers per row (the blocks where clipping pays).
std::vector<float> weights(int64_t n, int64_t k, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  std::uniform_int_distribution<int64_t> col(0, k - 1);
  std::vector<float> w(static_cast<size_t>(n * k));
  for (float& v : w) v = nd(rng);
  for (int64_t r = 0; r < n; ++r) w[static_cast<size_t>(r * k + col(rng))] *= 8.0f;
  return w;
}

// The dequantized matrix's squared error over one block, weighted.
double dequant_block_error(const std::vector<float>& w, const std::vector<float>& dq, size_t first, const float* imp) {
  double e = 0;
  for (size_t i = 0; i < 16; ++i) {
    const double d = static_cast<double>(w[first + i]) - dq[first + i];
    e += (imp ? imp[i] : 1.0) * d * d;
  }
  return e;
}

void check_never_worse(const float* importance) {
  const int64_t n = 64, k = 256;
  const std::vector<float> w = weights(n, k, 5);
  const float gamax = amax(w.data(), w.size());
  const Nvfp4Weight rule = quantize_weight(w.data(), n, k, gamax);
  const Nvfp4Weight srch = quantize_weight_searched(w.data(), n, k, gamax, importance);
  EXPECT_EQ(srch.weight_scale_2, rule.weight_scale_2);
  const std::vector<float> dr = dequantize_weight(rule), ds = dequantize_weight(srch);
  int better = 0;
  double total_rule = 0, total_search = 0;
  for (int64_t r = 0; r < n; ++r)
    for (int64_t b = 0; b < k / 16; ++b) {
      const size_t first = static_cast<size_t>(r * k + b * 16);
      const float* imp = importance ? importance + b * 16 : nullptr;
      const double er = dequant_block_error(w, dr, first, imp), es = dequant_block_error(w, ds, first, imp);
      // The search's own error measure is the dequantized one (up to float32 rounding of q:
      // e2m1 * (s * s2) there, (e2m1 * s) * s2 in dequantize_weight).
      const uint8_t sb = srch.scales[static_cast<size_t>(r * (k / 16) + b)];
      EXPECT_NEAR(block_error(w.data() + first, imp, sb, srch.weight_scale_2), es, 1e-5 * es + 1e-15);
      EXPECT_LE(es, er * (1 + 1e-5) + 1e-15) << "row " << r << " block " << b;
      if (es < er * 0.999) ++better;
      total_rule += er;
      total_search += es;
    }
  // Not a no-op: with 7 candidate codes most blocks find a better one, and the total drops.
  EXPECT_GT(better, n * (k / 16) / 4);
  EXPECT_LT(total_search, 0.9 * total_rule);
}

TEST(Nvfp4ScaleSearch, NeverWorseThanTheAmaxRulePerBlock) { check_never_worse(nullptr); }

TEST(Nvfp4ScaleSearch, NeverWorseUnderChannelImportance) {
  std::vector<float> imp(256);
  std::mt19937 rng(9);
  std::exponential_distribution<float> ed(1.0f);
  for (float& v : imp) v = ed(rng);
  check_never_worse(imp.data());
}

TEST(Nvfp4ScaleSearch, RuleCodeWhenItIsBest) {
  // Values on the E2M1 grid of the rule's scale: the rule is exact, nothing beats zero error.
  const float x[16] = {6, -4, 3, 2, 1.5f, 1, 0.5f, 0, -6, 4, -3, -2, -1.5f, -1, -0.5f, 0};
  const uint8_t rule = weight_block_scale(6.0f, 1.0f);  // scale 1.0
  EXPECT_EQ(rule, kE4M3One);
  EXPECT_EQ(search_block_scale(x, nullptr, 1.0f), rule);
  EXPECT_EQ(block_error(x, nullptr, rule, 1.0f), 0.0);
}

TEST(Nvfp4ScaleSearch, ClipsAnOutlierWhenThatLowersTheError) {
  // One outlier and fifteen ones: the rule's grid (scale 10/6 -> 1.625) puts the ones at 1.625 or
  // 0.8125 and the outlier at 9.75; another code trades the outlier's error for the fifteen's.
  float x[16];
  for (float& v : x) v = 1.0f;
  x[3] = 10.0f;
  const uint8_t rule = weight_block_scale(10.0f, 1.0f), s = search_block_scale(x, nullptr, 1.0f);
  EXPECT_NE(s, rule);
  EXPECT_LT(block_error(x, nullptr, s, 1.0f), block_error(x, nullptr, rule, 1.0f));
}

TEST(Nvfp4ScaleSearch, ChecksAndAllZeroAsTheRule) {
  std::vector<float> z(32, 0.0f);
  const Nvfp4Weight q = quantize_weight_searched(z.data(), 2, 16, std::nullopt);
  EXPECT_EQ(q.weight_scale_2, 0.0f);
  for (uint8_t s : q.scales) EXPECT_EQ(s, kE4M3One);
  std::vector<float> bad(20, 1.0f);
  EXPECT_THROW(quantize_weight_searched(bad.data(), 1, 20, std::nullopt), Error);
}

}  // namespace
}  // namespace fp4lm::quant::nvfp4_scale_search_test
