// RoPE against its formula: inv_freq_i = theta^(-2i/d), rotate-half pairing (i, i + d/2), and the
// "linear" and "llama3" rope_scaling rules.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "core/error.h"
#include "model/rope.h"

namespace fp4lm::model {
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
  s.type = "yarn";
  EXPECT_THROW(Rope(8, 10000.0, s), Error);
}

}  // namespace
}  // namespace fp4lm::model
