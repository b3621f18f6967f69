// MXFP4 reference math (docs/FORMAT.md §11): E8M0 scales, the dequantization formula, and the
// exact re-expression as NVFP4 (per-row power-of-two global, E4M3 power-of-two block scales) the
// kernels run it through, including where it stops being exact.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "common/error_of.h"
#include "core/dtype.h"
#include "quant/mxfp4.h"
#include "quant/nvfp4.h"

namespace fp4lm::quant::mxfp4_test {
namespace {

TEST(Mxfp4, E8M0IsABiasedPowerOfTwoAnd0xFFIsNaN) {
  EXPECT_EQ(e8m0_to_f32(127), 1.0f);
  EXPECT_EQ(e8m0_to_f32(128), 2.0f);
  EXPECT_EQ(e8m0_to_f32(120), 0x1p-7f);
  EXPECT_EQ(e8m0_to_f32(254), 0x1p127f);
  EXPECT_EQ(e8m0_to_f32(1), 0x1p-126f);
  EXPECT_EQ(e8m0_to_f32(0), 0x1p-127f);  // a float32 subnormal, still exact
  EXPECT_TRUE(std::isnan(e8m0_to_f32(0xFF)));
}

// Codes 0x10 0x32 ... : element 2j in the low nibble (gpt-oss: lut[blk & 0x0F] at 0::2).
TEST(Mxfp4, DequantizeFormulaAndNibbleOrder) {
  std::vector<uint8_t> codes(16, 0), scales = {129};  // 2^2
  codes[0] = 0x2A;  // element 0: 0xA = -1.0, element 1: 0x2 = 1.0
  codes[15] = 0xF7;  // element 30: 6, element 31: -6
  const std::vector<float> w = dequantize_mxfp4(codes.data(), scales.data(), 1, 32);
  EXPECT_EQ(w[0], -4.0f);
  EXPECT_EQ(w[1], 4.0f);
  EXPECT_EQ(w[30], 24.0f);
  EXPECT_EQ(w[31], -24.0f);
  EXPECT_EQ(w[2], 0.0f);
  scales[0] = 0xFF;
  EXPECT_NE(test::error_of([&] { dequantize_mxfp4(codes.data(), scales.data(), 1, 32); }).find("row 0, block 0: scale byte 0xFF is NaN"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { dequantize_mxfp4(codes.data(), scales.data(), 1, 16); }).find("not a multiple of 32"),
            std::string::npos);
}

// Random rows whose scales span up to 2^17: the NVFP4 form decodes to exactly the same floats.
TEST(Mxfp4, AsNvfp4IsExactWithinSeventeenBinadesAndAnErrorBeyond) {
  std::mt19937 rng(3);
  const int64_t k = 256;
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<uint8_t> codes(k / 2), scales(k / 32), e4m3(k / 16);
    for (auto& c : codes) c = static_cast<uint8_t>(rng());
    const int base = 100 + static_cast<int>(rng() % 40);
    for (auto& s : scales) s = static_cast<uint8_t>(base + static_cast<int>(rng() % 18));
    if (trial % 5 == 0) std::fill(codes.begin(), codes.begin() + 16, 0x88);  // an all-(-0) block: byte 0
    float global = 0;
    ASSERT_EQ(mxfp4_row_as_nvfp4(codes.data(), scales.data(), k, e4m3.data(), global), "");
    if (trial % 5 == 0) {
      EXPECT_EQ(e4m3[0], 0);
    }
    const std::vector<float> want = dequantize_mxfp4(codes.data(), scales.data(), 1, k);
    const std::vector<float> got = dequantize_weight(codes.data(), e4m3.data(), 1, k, global);
    for (int64_t j = 0; j < k; ++j) ASSERT_EQ(want[j], got[j]) << "trial " << trial << " element " << j;
  }
  // 2^18 apart, both blocks holding non-zero codes: not representable; with the small block all
  // zero it is (its scale is irrelevant).
  std::vector<uint8_t> codes(32, 0x11), scales = {127, 127 + 18}, e4m3(4);
  float global = 0;
  EXPECT_NE(mxfp4_row_as_nvfp4(codes.data(), scales.data(), 64, e4m3.data(), global).find("block 0: scale 2^0 is more than 2^17 below the row's largest 2^18"),
            std::string::npos);
  std::fill(codes.begin(), codes.begin() + 16, 0);
  EXPECT_EQ(mxfp4_row_as_nvfp4(codes.data(), scales.data(), 64, e4m3.data(), global), "");
  EXPECT_EQ(global, 0x1p10f);
  EXPECT_EQ(e4m3_to_f32(e4m3[2]), 256.0f);
}

}  // namespace
}  // namespace fp4lm::quant::mxfp4_test
