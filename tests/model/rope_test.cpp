// RoPE against its formula: inv_freq_i = theta^(-2i/d), rotate-half pairing (i, i + d/2), and the
// "linear" and "llama3" rope_scaling rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"
#include "model/layers/rope.h"

namespace fp4lm::model::rope_test {
namespace {

TEST(Rope, InverseFrequenciesFollowTheFormula) {
  Rope r(128, 500000.0, {});
  ASSERT_EQ(r.inv_freq().size(), 64u);
  for (int i = 0; i < 64; ++i)
    EXPECT_NEAR(r.inv_freq()[i], std::pow(500000.0, -2.0 * i / 128), 1e-6 * std::pow(500000.0, -2.0 * i / 128)) << i;
}

TEST(Rope, RotatesDimensionIWithIPlusHalf) {
  const int64_t d = 8;
  Rope r(d, 10000.0, {});
  float x[2 * d];
  for (int i = 0; i < 2 * d; ++i) x[i] = static_cast<float>(i + 1);
  float orig[2 * d];
  std::copy(x, x + 2 * d, orig);
  const int64_t pos = 5;
  float c[d / 2], s[d / 2];
  r.cos_sin(pos, c, s);
  r.rotate(x, 2, c, s);
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < d / 2; ++i) {
      const double ang = pos * std::pow(10000.0, -2.0 * i / d);
      const double a = orig[h * d + i], b = orig[h * d + i + d / 2];
      EXPECT_NEAR(x[h * d + i], a * std::cos(ang) - b * std::sin(ang), 1e-4) << h << "," << i;
      EXPECT_NEAR(x[h * d + i + d / 2], b * std::cos(ang) + a * std::sin(ang), 1e-4) << h << "," << i;
    }
  // Position 0 is the identity.
  r.cos_sin(0, c, s);
  std::copy(orig, orig + 2 * d, x);
  r.rotate(x, 2, c, s);
  for (int i = 0; i < 2 * d; ++i) EXPECT_EQ(x[i], orig[i]);
}

TEST(Rope, LinearScalingDividesEveryFrequency) {
  RopeScaling s;
  s.type = "linear";
  s.factor = 4.0;
  Rope plain(64, 10000.0, {}), scaled(64, 10000.0, s);
  for (size_t i = 0; i < plain.inv_freq().size(); ++i)
    EXPECT_FLOAT_EQ(scaled.inv_freq()[i], plain.inv_freq()[i] / 4.0f);
}

TEST(Rope, Llama3ScalingKeepsHighSlowsLowAndBlendsTheBand) {
  // Llama-3.1-8B's values.
  RopeScaling s;
  s.type = "llama3";
  s.factor = 8.0;
  s.low_freq_factor = 1.0;
  s.high_freq_factor = 4.0;
  s.original_max_position_embeddings = 8192;
  Rope plain(128, 500000.0, {}), scaled(128, 500000.0, s);
  int high = 0, low = 0, mid = 0;
  for (size_t i = 0; i < plain.inv_freq().size(); ++i) {
    const double f = std::pow(500000.0, -2.0 * i / 128);
    const double wavelen = 2 * std::numbers::pi / f;
    double want;
    if (wavelen < 8192 / 4.0) {
      want = f, ++high;
    } else if (wavelen > 8192 / 1.0) {
      want = f / 8, ++low;
    } else {
      const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * f / 8 + smooth * f, ++mid;
    }
    EXPECT_NEAR(scaled.inv_freq()[i], want, 2e-6 * want) << i;
  }
  // All three bands occur for these parameters.
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
}

TEST(Rope, RejectsOddHeadDimAndUnknownScaling) {
  EXPECT_THROW(Rope(7, 10000.0, {}), Error);
  RopeScaling s;
  s.type = "dynamic";
  EXPECT_THROW(Rope(8, 10000.0, s), Error);
}

// YaRN against HF's _compute_yarn_parameters written out in float64: the correction range of
// beta_fast / beta_slow rotations (floored / ceiled), the ramp between extrapolated and
// interpolated frequencies, and the attention factor mscale(factor, mscale) / mscale(factor,
// mscale_all_dim) multiplying cos and sin.
TEST(Rope, YarnMatchesTheFloat64Formula) {
  const int64_t dim = 16;
  const double theta = 10000.0, factor = 40.0, orig = 64.0, beta_fast = 32.0, beta_slow = 1.0;
  for (double mscale_all : {1.0, 0.707}) {
    RopeScaling s;
    s.type = "yarn";
    s.factor = factor;
    s.original_max_position_embeddings = 64;
    s.mscale = 1.0;
    s.mscale_all_dim = mscale_all;
    const Rope r(dim, theta, s);
    auto corr = [&](double rot) { return dim * std::log(orig / (rot * 2 * M_PI)) / (2 * std::log(theta)); };
    const double low = std::max(std::floor(corr(beta_fast)), 0.0), high = std::min(std::ceil(corr(beta_slow)), dim - 1.0);
    for (int64_t i = 0; i < dim / 2; ++i) {
      const double pf = std::pow(theta, 2.0 * i / dim);
      const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0), keep = 1 - ramp;
      const double want = 1 / (factor * pf) * (1 - keep) + 1 / pf * keep;
      EXPECT_NEAR(r.inv_freq()[i], want, 1e-6 * want) << i;
    }
    const double af = (0.1 * std::log(factor) + 1) / (0.1 * mscale_all * std::log(factor) + 1);
    EXPECT_NEAR(r.attention_scaling(), af, 1e-6);
    float c[8], sn[8];
    r.cos_sin(5, c, sn);
    EXPECT_NEAR(c[0], af * std::cos(5.0 * r.inv_freq()[0]), 1e-6);
    EXPECT_NEAR(sn[3], af * std::sin(5.0 * r.inv_freq()[3]), 1e-6);
  }
  EXPECT_DOUBLE_EQ(yarn_mscale(1.0, 1.0), 1.0);
  EXPECT_NEAR(yarn_mscale(40.0, 1.0), 0.1 * std::log(40.0) + 1, 1e-12);
}

}  // namespace
}  // namespace fp4lm::model::rope_test
