// Dynamic W4A4 (`--activation-scale dynamic`): the per-token global activation scale
// (quant::dynamic_activation_scale) and the per-token quantize-dequantize the reference backend
// runs (quant::qdq_activation_per_token). docs/FORMAT.md §5, "Dynamic activation scale".
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "quant/nvfp4.h"

namespace fp4lm::quant::nvfp4_dynamic_scale_test {
namespace {

uint8_t code_at(const Nvfp4Activation& a, int64_t t, int64_t j) {
  const uint8_t b = a.codes[static_cast<size_t>(t * (a.k / 2) + j / 2)];
  return (j & 1) ? b >> 4 : b & 0xf;
}

// amax / 2688, not amax / 448 or amax / 6: the scale is exact where the division is.
TEST(Nvfp4DynamicActivationScale, IsTheTokensAmaxOver2688) {
  std::vector<float> x(32, 0.25f);
  x[7] = -2688.0f;
  EXPECT_EQ(dynamic_activation_scale(x.data(), 32), 1.0f);
  x[7] = 21504.0f;  // 8 × 2688
  EXPECT_EQ(dynamic_activation_scale(x.data(), 32), 8.0f);
  x[7] = 5.376f;
  EXPECT_EQ(dynamic_activation_scale(x.data(), 32), 5.376f / 2688.0f);
  // Only the token's own k elements count.
  std::vector<float> two = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 2688.0f * 4};
  EXPECT_EQ(dynamic_activation_scale(two.data(), 16), 16.0f / 2688.0f);
}

// The token's largest block gets the E4M3 scale 448 (byte 0x7E: the format's whole range) and its
// largest element the code ±6; a smaller block's scale is e4m3(G × bamax / 6).
TEST(Nvfp4DynamicActivationScale, LargestBlockUsesTheWholeE4M3Range) {
  std::vector<float> x(32, 0.0f);
  for (int j = 0; j < 16; ++j) x[j] = 0.1f * static_cast<float>(j - 8);
  x[3] = -5.376f;
  for (int j = 16; j < 32; ++j) x[j] = 0.01f * static_cast<float>(j - 20);
  const float s = dynamic_activation_scale(x.data(), 32);
  const Nvfp4Activation a = quantize_activation(x.data(), 1, 32, s);
  EXPECT_EQ(a.scales[0], 0x7E);
  EXPECT_EQ(code_at(a, 0, 3), 0xF);  // -6
  EXPECT_EQ(a.scales[1], activation_block_scale(0.01f * 11.0f, s));
  EXPECT_LT(a.scales[1], 0x7E);
}

// Zeros, tiny values, non-finite values: the scale stays usable (1/scale finite) or leaves the
// error to the quantizer, which names the element.
TEST(Nvfp4DynamicActivationScale, ZeroTinyAndNonFiniteTokens) {
  const float fmin = std::numeric_limits<float>::min();
  std::vector<float> zeros(48, 0.0f);
  EXPECT_EQ(dynamic_activation_scale(zeros.data(), 48), fmin);
  const std::vector<float> q = qdq_activation_per_token(zeros.data(), 1, 48);
  for (float v : q) EXPECT_EQ(v, 0.0f);
  std::vector<float> tiny(16, 0.0f);
  tiny[5] = 1e-38f;  // / 2688 would be a float32 subnormal
  EXPECT_EQ(dynamic_activation_scale(tiny.data(), 16), fmin);
  EXPECT_TRUE(std::isfinite(1.0f / dynamic_activation_scale(tiny.data(), 16)));
  std::vector<float> bad(16, 1.0f);
  bad[9] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(dynamic_activation_scale(bad.data(), 16), 1.0f);
  bad[9] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(dynamic_activation_scale(bad.data(), 16), 1.0f);
  try {
    qdq_activation_per_token(bad.data(), 1, 16);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("element [0, 9]"), std::string::npos) << e.what();
  }
}

// Each token with its own scale: a token's values do not depend on its batch-mates, and a small
// token next to a large one keeps its precision (under one scale for the call it would not).
TEST(Nvfp4DynamicActivationScale, PerTokenQdqIsIndependentOfBatchMates) {
  const int64_t k = 64;
  std::vector<float> x(static_cast<size_t>(3 * k));
  for (int64_t j = 0; j < k; ++j) {
    x[j] = std::sin(0.37f * static_cast<float>(j));                   // ~1
    x[k + j] = 1000.0f * std::cos(0.11f * static_cast<float>(j));     // ~1000
    x[2 * k + j] = 0.001f * std::sin(1.3f * static_cast<float>(j));  // ~0.001
  }
  const std::vector<float> all = qdq_activation_per_token(x.data(), 3, k);
  for (int64_t t = 0; t < 3; ++t) {
    const float s = dynamic_activation_scale(x.data() + t * k, k);
    const std::vector<float> alone = qdq_activation(x.data() + t * k, 1, k, s);
    for (int64_t j = 0; j < k; ++j) EXPECT_EQ(all[t * k + j], alone[j]) << t << " " << j;
  }
  // One scale for the whole call (the largest token's) would flush the 0.001 token to zero codes.
  const float call_scale = dynamic_activation_scale(x.data(), 3 * k);
  const std::vector<float> per_call = qdq_activation(x.data(), 3, k, call_scale);
  double err_token = 0, err_call = 0, norm = 0;
  for (int64_t j = 0; j < k; ++j) {
    const double v = x[2 * k + j];
    err_token += (all[2 * k + j] - v) * (all[2 * k + j] - v);
    err_call += (per_call[2 * k + j] - v) * (per_call[2 * k + j] - v);
    norm += v * v;
  }
  EXPECT_LT(std::sqrt(err_token / norm), 0.2);  // NVFP4's own error
  EXPECT_GT(std::sqrt(err_call / norm), 0.9);   // lost
}

}  // namespace
}  // namespace fp4lm::quant::nvfp4_dynamic_scale_test
