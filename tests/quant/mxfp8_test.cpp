// MXFP8 activations as ModelOpt's MXFP8QTensor quantizes them (docs/FORMAT.md, "MXFP8"): the E8M0
// exponent ceil(log2(amax / 448)) per 32 inputs, exact at powers of two, and the E4M3 codes.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/error_of.h"
#include "core/dtype.h"
#include "quant/mxfp8.h"

namespace fp4lm::quant::mxfp8_test {
namespace {

TEST(Mxfp8Exponent, IsTheCeilingOfLog2OfAmaxOver448) {
  EXPECT_EQ(mxfp8_exponent(448.0f), 0);                             // 448/448 = 2^0 exactly
  EXPECT_EQ(mxfp8_exponent(std::nextafter(448.0f, 1e9f)), 1);       // one float above: 2^1
  EXPECT_EQ(mxfp8_exponent(224.0f), -1);                            // 2^-1 exactly
  EXPECT_EQ(mxfp8_exponent(300.0f), 0);                             // log2(0.67) = -0.58 -> 0
  EXPECT_EQ(mxfp8_exponent(460.0f), 1);                             // OCP's floor rule would give 0 (and saturate)
  EXPECT_EQ(mxfp8_exponent(448.0f * std::ldexp(1.0f, -20)), -20);
  EXPECT_EQ(mxfp8_exponent(0.0f), -127);                            // an all-zero block
  EXPECT_EQ(mxfp8_exponent(3e38f), 120);                            // log2(3e38 / 448) = 119.01: float32 never reaches 127
  EXPECT_EQ(mxfp8_exponent(1e-44f), -127);                          // clamped
}

TEST(Mxfp8Qdq, HandWorkedBlock) {
  // amax 460 -> e = 1, scale 2: x / 2 rounded to E4M3, times 2.
  std::vector<float> x(32, 0.0f);
  x[0] = 460.0f;   // 230 -> E4M3 step 16 at [128, 256): 224 -> 448
  x[1] = -3.1f;    // -1.55 -> step 0.125 at [1, 2): -1.5 -> -3
  x[2] = 0.01f;    // 0.005: an E4M3 subnormal (steps of 2^-9)
  x[31] = 100.0f;  // 50 -> step 4 at [32, 64): the tie of 48 and 52 goes to the even mantissa, 48
  mxfp8_qdq_row(x.data(), 32);
  EXPECT_EQ(x[0], 448.0f);
  EXPECT_EQ(x[1], -3.0f);
  EXPECT_EQ(x[2], 2.0f * e4m3_to_f32(f32_to_e4m3(0.005f)));
  EXPECT_EQ(x[31], 96.0f);
  EXPECT_EQ(x[3], 0.0f);
}

TEST(Mxfp8Qdq, EachBlockHasItsOwnScaleAndBadInputsAreErrors) {
  std::vector<float> x(64, 1.0f);
  x[40] = 4096.0f;  // second block: e = ceil(log2(9.14)) = 4, scale 16: 1 -> 1/16 exactly
  mxfp8_qdq_row(x.data(), 64);
  EXPECT_EQ(x[0], 1.0f);
  EXPECT_EQ(x[33], 1.0f);
  EXPECT_EQ(x[40], 4096.0f);
  std::vector<float> y(48, 1.0f);
  EXPECT_NE(test::error_of([&] { mxfp8_qdq_row(y.data(), 48); }).find("k = 48"), std::string::npos);
  std::vector<float> z(32, 1.0f);
  z[7] = NAN;
  EXPECT_NE(test::error_of([&] { mxfp8_qdq_row(z.data(), 32); }).find("element 7"), std::string::npos);
}

}  // namespace
}  // namespace fp4lm::quant::mxfp8_test
