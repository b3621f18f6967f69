// compressed-tensors' global scale rule (docs/FORMAT.md §9): torch's `2688 / amax`, evaluated as
// reciprocal(amax) * 2688. llm-compressor's files hold exactly these bits.
#include "quant/compressed_tensors_scale.h"

#include <gtest/gtest.h>

#include <random>

namespace fp4lm::quant::compressed_tensors_scale_test {
namespace {

TEST(CompressedTensorsGlobalScale, IsTorchsReciprocalTimes2688) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(1e-3f, 8.0f);
  int differs_from_quotient = 0, differs_from_modelopt_reciprocal = 0;
  for (int i = 0; i < 2000; ++i) {
    const volatile float a = u(rng);
    const float g = compressed_tensors_global_scale(a);
    const volatile float r = 1.0f / a;
    EXPECT_EQ(g, r * 2688.0f) << a;
    differs_from_quotient += g != 2688.0f / a;
    const volatile float s2 = a / 2688.0f;  // ModelOpt's weight_scale_2
    differs_from_modelopt_reciprocal += g != 1.0f / s2;
  }
  // The rule matters: a quarter to a third of amaxes round differently under the other two forms.
  EXPECT_GT(differs_from_quotient, 200);
  EXPECT_GT(differs_from_modelopt_reciprocal, 200);
}

TEST(CompressedTensorsGlobalScale, ZeroAmaxGivesThePlaceholder) {
  EXPECT_EQ(compressed_tensors_global_scale(0.0f), 1.0f);  // 1/0 = inf
  EXPECT_EQ(compressed_tensors_global_scale(1.0f), 2688.0f);
  EXPECT_EQ(compressed_tensors_global_scale(2688.0f), 1.0f);
}

}  // namespace
}  // namespace fp4lm::quant::compressed_tensors_scale_test
