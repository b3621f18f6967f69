// ModelOpt's uncalibrated per-tensor FP8 fake quantization (quant/fp8_tensor.h, W4A8_MXFP4_FP8's
// input quantizer): scale = 448 / amax, e4m3(clamp(x · scale)) · (1 / scale), amax <= 2^-24 as 1.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "quant/fp8_tensor.h"

namespace fp4lm::quant {
namespace {

TEST(Fp8DynamicTensor, AmaxMapsTo448AndEveryValueToTheNearestE4m3Step) {
  // amax 448: scale 1, the E4M3 grid itself: representable values unchanged, others rounded to
  // nearest even (17 lies between 16 and 18: a tie, to 16's even mantissa).
  std::vector<float> x = {448.0f, -2.5f, 1.0f, 17.0f, 0.0f, -0.001953125f};
  quant::fp8_qdq_dynamic_tensor(x.data(), x.size(), 448.0f);
  EXPECT_EQ(x, (std::vector<float>{448.0f, -2.5f, 1.0f, 16.0f, 0.0f, -0.001953125f}));
  // amax 3: scale 448/3 in float32; x = 1 -> 149.33 -> 144 (the step below, 16 apart), times 1/scale.
  std::vector<float> y = {3.0f, 1.0f};
  quant::fp8_qdq_dynamic_tensor(y.data(), y.size(), 3.0f);
  const float scale = 448.0f / 3.0f, inv = 1.0f / scale;
  EXPECT_EQ(y[0], 448.0f * inv);
  EXPECT_EQ(y[1], 144.0f * inv);
  EXPECT_NEAR(y[0], 3.0f, 1e-6f);
}

TEST(Fp8DynamicTensor, ATinyAmaxCountsAsOne) {
  std::vector<float> x = {1e-9f, -1e-9f};
  quant::fp8_qdq_dynamic_tensor(x.data(), x.size(), 1e-9f);  // scale 448: 4.5e-7 is below E4M3's 2^-9
  EXPECT_EQ(x, (std::vector<float>{0.0f, -0.0f}));
  std::vector<float> z = {0.0f, 0.0f};
  quant::fp8_qdq_dynamic_tensor(z.data(), z.size(), 0.0f);
  EXPECT_EQ(z, (std::vector<float>{0.0f, 0.0f}));
}

}  // namespace
}  // namespace fp4lm::quant
