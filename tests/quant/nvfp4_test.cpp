// The NVFP4 reference (quant/nvfp4.h) on hand-worked vectors: every value below is worked out
// from docs/FORMAT.md by hand (mostly with weight_scale_2 = 1, so y = x / block scale), plus a few
// "order-sensitive" vectors where evaluating §3's float32 expressions in any other order gives a
// different byte. docs/FORMAT.md points at these tests.
#include "quant/nvfp4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace fp4lm::quant::nvfp4_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
// Group amax that makes weight_scale_2 exactly 1, so den = float(block scale).
constexpr float kUnitGroup = 2688.0f;

uint8_t code_at(const std::vector<uint8_t>& packed, size_t i) {
  return (i % 2 == 0) ? (packed[i / 2] & 0xf) : (packed[i / 2] >> 4);
}

std::vector<uint8_t> codes_of(const std::vector<uint8_t>& packed, size_t first, size_t count) {
  std::vector<uint8_t> c;
  for (size_t i = first; i < first + count; ++i) c.push_back(code_at(packed, i));
  return c;
}

// Quantizes one row.
Nvfp4Weight quant_row(const std::vector<float>& row, std::optional<float> group = std::nullopt) {
  return quantize_weight(row.data(), 1, static_cast<int64_t>(row.size()), group);
}

// Runs f, expects fp4lm::Error whose message contains `needle`.
template <typename F>
void expect_error(F f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected fp4lm::Error mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

// Threshold t, the code at t, just below t and just above t (docs/FORMAT.md thresholds).
struct Threshold { float t; uint8_t at, below, above; };
constexpr Threshold kThresholds[] = {{0.25f, 0, 0, 1}, {0.75f, 2, 1, 2}, {1.25f, 2, 2, 3},
                                     {1.75f, 4, 3, 4}, {2.5f, 4, 4, 5},  {3.5f, 6, 5, 6},
                                     {5.0f, 6, 6, 7}};

// ============================================================ weights

// Block amax 6*d with weight_scale_2 = 1 gives block scale d (exact in E4M3 for d = 0.5, 1, 2),
// so y = x/d exactly; each threshold is hit exactly and one float either side of it.
TEST(Nvfp4WeightQuant, E2M1ThresholdsAtAndBesideEachTie) {
  for (float d : {0.5f, 1.0f, 2.0f}) {
    for (const Threshold& th : kThresholds) {
      const float t = th.t * d;
      const float below = std::nextafter(t, 0.0f), above = std::nextafter(t, kInf);
      std::vector<float> row = {6 * d, t, below, above, -t, -below, -above};
      row.resize(16, 0.0f);
      Nvfp4Weight q = quant_row(row, kUnitGroup);
      ASSERT_EQ(q.weight_scale_2, 1.0f);
      ASSERT_EQ(e4m3_to_f32(q.scales[0]), d);
      const std::vector<uint8_t> want = {7, th.at, th.below, th.above, static_cast<uint8_t>(th.at | 8),
                                         static_cast<uint8_t>(th.below | 8),
                                         static_cast<uint8_t>(th.above | 8)};
      EXPECT_EQ(codes_of(q.codes, 0, 7), want) << "threshold " << th.t << " scale " << d;
    }
  }
}

TEST(Nvfp4WeightQuant, NegativeValuesRoundingToZeroKeepTheSignBit) {
  std::vector<float> row = {6, -0.1f, -0.25f, -1e-6f, -0.0f, 0.0f, 0.1f, 0.25f};
  row.resize(16, 0.0f);
  Nvfp4Weight q = quant_row(row, kUnitGroup);
  // y < 0 sets bit 3 even when |y| rounds to 0; -0.0 is not < 0, so it is +0.
  EXPECT_EQ(codes_of(q.codes, 0, 8), (std::vector<uint8_t>{7, 8, 8, 8, 0, 0, 0, 0}));
  std::vector<float> dq = dequantize_weight(q);
  EXPECT_EQ(dq[1], 0.0f);
  EXPECT_TRUE(std::signbit(dq[1]));  // 0x8 dequantizes to -0
}

TEST(Nvfp4WeightQuant, NibbleOrderElement2jInLowNibble) {
  const std::vector<float> row = {1, -3, 0.5f, 6, 0, -0.5f, 4, 2, 1.5f, -6, 3, -1, 0, 0, -2, -4};
  Nvfp4Weight q = quant_row(row, kUnitGroup);
  // codes 2,D | 1,7 | 0,9 | 6,4 | 3,F | 5,A | 0,0 | C,E  (low nibble first)
  EXPECT_EQ(q.codes, (std::vector<uint8_t>{0xD2, 0x71, 0x90, 0x46, 0xF3, 0xA5, 0x00, 0xEC}));
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{0x38}));
  EXPECT_EQ(dequantize_weight(q), row);  // every value is on the grid: exact round trip
}

TEST(Nvfp4WeightQuant, AllZeroBlockGetsScaleOne) {
  // Own amax 3 (weight_scale_2 = 3/2688); the second block is all zero: s = 0 -> 1 -> 0x38.
  std::vector<float> row(32, 0.0f);
  row[0] = 3.0f;
  row[1] = -1.0f;
  Nvfp4Weight q = quant_row(row);
  EXPECT_EQ(q.weight_scale_2, 3.0f / 2688.0f);
  ASSERT_EQ(q.scales.size(), 2u);
  EXPECT_EQ(q.scales[1], 0x38);
  EXPECT_EQ(codes_of(q.codes, 16, 16), std::vector<uint8_t>(16, 0));
  std::vector<float> dq = dequantize_weight(q);
  for (int i = 16; i < 32; ++i) EXPECT_EQ(dq[i], 0.0f);
}

TEST(Nvfp4WeightQuant, AllZeroTensorGivesZeroGlobalScaleAndScaleOne) {
  const std::vector<float> w(2 * 32, 0.0f);
  for (std::optional<float> group : {std::optional<float>{}, std::optional<float>{0.0f}}) {
    Nvfp4Weight q = quantize_weight(w.data(), 2, 32, group);
    EXPECT_EQ(q.n, 2);
    EXPECT_EQ(q.k, 32);
    EXPECT_EQ(q.weight_scale_2, 0.0f);
    EXPECT_EQ(q.codes, std::vector<uint8_t>(32, 0));
    EXPECT_EQ(q.scales, std::vector<uint8_t>(4, 0x38));
    EXPECT_EQ(dequantize_weight(q), w);
  }
  // With a positive group amax the ordinary rule applies: every block scale is 1.
  Nvfp4Weight q = quantize_weight(w.data(), 2, 32, 5.0f);
  EXPECT_EQ(q.weight_scale_2, 5.0f / 2688.0f);
  EXPECT_EQ(q.scales, std::vector<uint8_t>(4, 0x38));
  EXPECT_EQ(q.codes, std::vector<uint8_t>(32, 0));
}

TEST(Nvfp4WeightQuant, BlockScaleBelowMinIsClampedTo2PowMinus9) {
  // s2 = 1; block 1 amax 6*2^-11 -> s = 2^-11, clamped to 2^-9 (0x01). Without the clamp E4M3
  // would round s to 0 and the division would blow up. y = x * 2^9.
  std::vector<float> row(32, 0.0f);
  row[0] = 6.0f;
  const float b1[] = {6 * 0x1p-11f, 0x1p-11f, -3 * 0x1p-11f, 0x1p-10f};
  for (int i = 0; i < 4; ++i) row[16 + i] = b1[i];
  Nvfp4Weight q = quant_row(row, kUnitGroup);
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{0x38, 0x01}));
  // y = 1.5 -> 3, y = 0.25 -> 0, y = -0.75 -> 0xA, y = 0.5 -> 1
  EXPECT_EQ(codes_of(q.codes, 16, 4), (std::vector<uint8_t>{3, 0, 0xA, 1}));
  std::vector<float> dq = dequantize_weight(q);
  EXPECT_EQ(dq[16], 1.5f * 0x1p-9f);
  EXPECT_EQ(dq[18], -1.0f * 0x1p-9f);
  // A far smaller block: scale still 0x01, and every code rounds to 0.
  std::vector<float> tiny(32, 0.0f);
  tiny[0] = 6.0f;
  tiny[16] = 1e-8f;
  tiny[17] = -1e-8f;
  Nvfp4Weight t = quant_row(tiny, kUnitGroup);
  EXPECT_EQ(t.scales[1], 0x01);
  EXPECT_EQ(codes_of(t.codes, 16, 2), (std::vector<uint8_t>{0, 8}));
}

TEST(Nvfp4WeightQuant, BlockScaleAbove448WhenGroupAmaxIsBelowTheTensorsOwn) {
  // Group amax 2688 (s2 = 1) but the block's amax is 6000: s = 1000, clamped to 448 (0x7E).
  std::vector<float> row = {6000, 448, -2016, 896};
  row.resize(16, 0.0f);
  Nvfp4Weight q = quant_row(row, kUnitGroup);
  EXPECT_EQ(q.weight_scale_2, 1.0f);
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{0x7e}));
  // y = 13.4 -> 6 (saturated), 1 -> 1, -4.5 -> -4, 2 -> 2
  EXPECT_EQ(codes_of(q.codes, 0, 4), (std::vector<uint8_t>{7, 2, 0xE, 4}));
  std::vector<float> dq = dequantize_weight(q);
  EXPECT_EQ(dq[0], 2688.0f);  // 6 * 448 * 1: the clamp caps what the block can represent
  EXPECT_EQ(dq[2], -1792.0f);
}

TEST(Nvfp4WeightQuant, SubnormalE4M3BlockScales) {
  // s2 = 1. Block amax 18*2^-9 -> s = 3*2^-9 (E4M3 subnormal 0x03), exact.
  std::vector<float> row(32, 0.0f);
  const float b0[] = {18 * 0x1p-9f, 9 * 0x1p-9f, -4.5f * 0x1p-9f};
  for (int i = 0; i < 3; ++i) row[i] = b0[i];
  // Block amax 15*2^-9 -> s = 2.5*2^-9: a tie, rounded to even 2*2^-9 (0x02), so y = x * 2^8.
  const float b1[] = {15 * 0x1p-9f, 0x1p-9f, 5 * 0x1p-9f};
  for (int i = 0; i < 3; ++i) row[16 + i] = b1[i];
  Nvfp4Weight q = quant_row(row, kUnitGroup);
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{0x03, 0x02}));
  EXPECT_EQ(codes_of(q.codes, 0, 3), (std::vector<uint8_t>{7, 5, 0xB}));      // 6, 3, -1.5
  EXPECT_EQ(codes_of(q.codes, 16, 3), (std::vector<uint8_t>{7, 1, 4}));       // 7.5->6, 0.5, 2.5->2
  std::vector<float> dq = dequantize_weight(q);
  EXPECT_EQ(dq[0], 18 * 0x1p-9f);
  EXPECT_EQ(dq[16], 12 * 0x1p-9f);  // 6 * 2^-8: the rounded-down scale cannot reach 15*2^-9
}

TEST(Nvfp4WeightQuant, GroupAmaxLargerThanTheTensorsOwn) {
  // Own amax 3, group amax 5376 -> s2 = 2 (not 3/2688); block s = 3/12 = 0.25 (0x28); den 0.5.
  std::vector<float> row = {3, 1.5f, -0.5f, 0.2f};
  row.resize(16, 0.0f);
  Nvfp4Weight q = quant_row(row, 5376.0f);
  EXPECT_EQ(q.weight_scale_2, 2.0f);
  EXPECT_EQ(q.scales, (std::vector<uint8_t>{0x28}));
  EXPECT_EQ(codes_of(q.codes, 0, 4), (std::vector<uint8_t>{7, 5, 0xA, 1}));  // 6, 3, -1, 0.4->0.5
  std::vector<float> dq = dequantize_weight(q);
  EXPECT_EQ(dq[0], 3.0f);
  EXPECT_EQ(dq[3], 0.25f);
  // The same row with its own amax has a different global scale but the same values here.
  Nvfp4Weight own = quant_row(row);
  EXPECT_EQ(own.weight_scale_2, 3.0f / 2688.0f);
  EXPECT_NE(own.scales, q.scales);
}

// Found by search, then fixed here: with amax = 1.669921875 the block (amax 0.5322265625) scale is
// 0x71 and x = 0.156005859375 gives y just under 1.75 -> 1.5 (code 3) with §3's true division
// x / (float(s) * s2). x * (1/den) or (x / float(s)) / s2 would give 2 (code 4).
TEST(Nvfp4WeightQuant, OrderSensitiveVectorUsesTrueDivisionByDen) {
  std::vector<float> row(32, 0.0f);
  row[0] = 0x1.ab8p+0f;     // tensor amax 1.669921875
  row[16] = 0x1.108p-1f;    // block amax 0.5322265625
  row[17] = 0x1.40ap-3f;    // 0.156005859375, in a high nibble
  row[18] = 0x1.40ap-3f;    // and in a low one
  Nvfp4Weight q = quant_row(row);
  ASSERT_EQ(q.weight_scale_2, 0x1.ab8p+0f / 2688.0f);
  EXPECT_EQ(q.scales[1], 0x71);
  EXPECT_EQ(code_at(q.codes, 17), 3);
  EXPECT_EQ(code_at(q.codes, 18), 3);
  // Cross-check that the alternatives really differ, so this test can tell them apart.
  const float s2 = q.weight_scale_2, sc = e4m3_to_f32(0x71);
  EXPECT_EQ(f32_to_e2m1(row[17] / (sc * s2)), 3);
  EXPECT_EQ(f32_to_e2m1(row[17] * (1.0f / (sc * s2))), 4);
  EXPECT_EQ(f32_to_e2m1(row[17] / sc / s2), 4);
}

// s = bamax / (6 * s2), not bamax / 6 / s2: here the two give 0x70 and 0x71.
TEST(Nvfp4WeightQuant, OrderSensitiveVectorBlockScale) {
  const float amax = 0x1.5ep+0f, bamax = 0x1.a9p-2f;  // 1.3671875, 0.4150390625
  const float s2 = amax / 2688.0f;
  EXPECT_EQ(weight_block_scale(bamax, s2), 0x70);
  EXPECT_EQ(f32_to_e4m3(bamax / 6.0f / s2), 0x71);
  std::vector<float> row(32, 0.0f);
  row[0] = amax;
  row[16] = bamax;
  EXPECT_EQ(quant_row(row).scales[1], 0x70);
}

TEST(Nvfp4WeightQuant, KNotAMultipleOf16IsAClearError) {
  std::vector<float> w(3 * 24, 1.0f);
  expect_error([&] { quantize_weight(w.data(), 3, 24); }, "k = 24");
  expect_error([&] { quantize_weight(w.data(), 1, 8); }, "multiple of the NVFP4 block size 16");
  expect_error([&] { quantize_weight(w.data(), 1, 17); }, "k = 17");
  std::vector<uint8_t> codes(12), scales(2);
  expect_error([&] { dequantize_weight(codes.data(), scales.data(), 1, 24, 1.0f); }, "k = 24");
}

TEST(Nvfp4WeightQuant, BadInputsAreErrors) {
  std::vector<float> w(32, 1.0f);
  w[19] = kNaN;
  expect_error([&] { quantize_weight(w.data(), 2, 16); }, "[1, 3]");
  w[19] = -kInf;
  expect_error([&] { quantize_weight(w.data(), 2, 16); }, "-inf");
  w[19] = 1.0f;
  expect_error([&] { quantize_weight(w.data(), 2, 16, -1.0f); }, "group amax = -1");
  expect_error([&] { quantize_weight(w.data(), 2, 16, kNaN); }, "group amax = nan");
  expect_error([&] { quantize_weight(w.data(), 2, 16, kInf); }, "group amax = inf");
  expect_error([&] { quantize_weight(w.data(), 2, 16, 0.0f); }, "group amax is 0");
  // amax / 2688 underflowing float32 is refused rather than dividing by zero.
  std::vector<float> tiny(16, 0.0f);
  tiny[0] = 1e-44f;
  expect_error([&] { quant_row(tiny); }, "underflows");
}

TEST(Nvfp4WeightQuant, ShapesAndEmptyTensor) {
  std::vector<float> w(5 * 48, 0.5f);
  Nvfp4Weight q = quantize_weight(w.data(), 5, 48);
  EXPECT_EQ(q.codes.size(), 5u * 24);
  EXPECT_EQ(q.scales.size(), 5u * 3);
  Nvfp4Weight e = quantize_weight(nullptr, 0, 64);
  EXPECT_TRUE(e.codes.empty());
  EXPECT_TRUE(e.scales.empty());
}

// Every dequantized value lies within half a grid step of the original (in units of the block's
// den = float(scale) * s2), or at the saturated 6 * den when |y| > 6, and never flips sign.
TEST(Nvfp4WeightQuant, RoundTripErrorBounds) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  const int64_t n = 24, k = 128;
  std::vector<float> w(n * k);
  for (float& v : w) v = nd(rng);
  w[5] = 0.5f;  // an outlier sets the tensor amax
  for (int64_t c = 32; c < 48; ++c) w[3 * k + c] = 0.0f;  // one all-zero block
  Nvfp4Weight q = quantize_weight(w.data(), n, k);
  EXPECT_EQ(q.weight_scale_2, 0.5f / 2688.0f);
  std::vector<float> dq = dequantize_weight(q);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      const size_t i = static_cast<size_t>(r * k + c);
      const float den = e4m3_to_f32(q.scales[r * (k / 16) + c / 16]) * q.weight_scale_2;
      const float ay = std::fabs(w[i] / den);
      ASSERT_LE(ay, 6.5f) << "block amax must map near 6: r " << r << " c " << c;
      const float half_step = ay < 2 ? 0.25f : ay < 4 ? 0.5f : ay <= 6 ? 1.0f : ay - 6.0f;
      ASSERT_LE(std::fabs(w[i] - dq[i]), (half_step + 1e-5f) * den) << "r " << r << " c " << c;
      ASSERT_FALSE(dq[i] * w[i] < 0) << "sign flip at r " << r << " c " << c;
    }
  }
  // The element carrying the tensor amax is reproduced to within E4M3's rounding of its scale.
  EXPECT_NEAR(dq[5], 0.5f, 0.5f / 16);
}

// ============================================================ dequantize

TEST(Nvfp4WeightDequant, FormulaAndPerRowGlobalScalesForFusedShards) {
  // Shards with their own weight_scale_2 (as q/k/v exported separately) dequantize exactly with a
  // per-row global scale; no block scale is touched.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  std::vector<float> a(2 * 32), b(3 * 32);
  for (float& v : a) v = ud(rng) * 0.01f;
  for (float& v : b) v = ud(rng) * 40.0f;
  Nvfp4Weight qa = quantize_weight(a.data(), 2, 32), qb = quantize_weight(b.data(), 3, 32);
  ASSERT_NE(qa.weight_scale_2, qb.weight_scale_2);
  std::vector<uint8_t> codes = qa.codes, scales = qa.scales;
  codes.insert(codes.end(), qb.codes.begin(), qb.codes.end());
  scales.insert(scales.end(), qb.scales.begin(), qb.scales.end());
  const float rows[5] = {qa.weight_scale_2, qa.weight_scale_2, qb.weight_scale_2,
                         qb.weight_scale_2, qb.weight_scale_2};
  std::vector<float> fused = dequantize_weight(codes.data(), scales.data(), 5, 32, 0.0f, rows);
  std::vector<float> want = dequantize_weight(qa), wb = dequantize_weight(qb);
  want.insert(want.end(), wb.begin(), wb.end());
  EXPECT_EQ(fused, want);
  // w = e2m1(code) * float(scale) * global, in that order.
  for (size_t i = 0; i < want.size(); ++i) {
    const size_t r = i / 32;
    const float s = e4m3_to_f32(scales[i / 16]);
    EXPECT_EQ(fused[i], e2m1_to_f32(code_at(codes, i)) * s * rows[r]) << i;
  }
}

TEST(Nvfp4WeightDequant, NaNScaleBytesAndSizeMismatchAreErrors) {
  std::vector<uint8_t> codes(16, 0x22), scales = {0x38, 0x7f};
  expect_error([&] { dequantize_weight(codes.data(), scales.data(), 1, 32, 1.0f); }, "0x7F");
  scales[1] = 0xff;
  expect_error([&] { dequantize_weight(codes.data(), scales.data(), 1, 32, 1.0f); }, "[0, 1]");
  Nvfp4Weight w;
  w.n = 2;
  w.k = 32;
  w.codes.resize(32);
  w.scales.resize(3);
  expect_error([&] { dequantize_weight(w); }, "needs 32 code bytes and 4 scales");
}

// ============================================================ activations

TEST(Nvfp4ActivationQuant, HandWorkedCodesAndScales) {
  // input_scale 1 -> G = 1; block amax 6 -> sf = e4m3(1) = 0x38, so y = x.
  const std::vector<float> x = {6,    -0.25f, 0.26f, -0.7f, 0.75f, 1.25f, 1.3f,  -1.75f,
                                2.5f, -2.6f,  3.4f,  3.5f,  5.0f,  5.1f,  -0.1f, 0.0f};
  Nvfp4Activation a = quantize_activation(x.data(), 1, 16, 1.0f);
  EXPECT_EQ(a.m, 1);
  EXPECT_EQ(a.k, 16);
  EXPECT_EQ(a.scales, (std::vector<uint8_t>{0x38}));
  // codes 7,8 | 1,9 | 2,2 | 3,C | 4,D | 5,6 | 6,7 | 8,0
  EXPECT_EQ(a.codes, (std::vector<uint8_t>{0x87, 0x91, 0x22, 0xC3, 0xD4, 0x65, 0x76, 0x08}));
  const std::vector<float> want = {6, -0.0f, 0.5f, -0.5f, 1, 1, 1.5f, -2, 2, -3, 3, 4, 4, 6, -0.0f, 0};
  EXPECT_EQ(dequantize_activation(a, 1.0f), want);
  EXPECT_EQ(qdq_activation(x.data(), 1, 16, 1.0f), want);
}

TEST(Nvfp4ActivationQuant, ThresholdsWithScaledInput) {
  // input_scale 0.5 -> G = 2; block amax 3 -> G*3/6 = 1 -> sf = 1; y = 2x exactly.
  for (const Threshold& th : kThresholds) {
    const float t = th.t / 2;
    const float below = std::nextafter(t, 0.0f), above = std::nextafter(t, kInf);
    std::vector<float> x = {3, t, below, above, -t, -below, -above};
    x.resize(16, 0.0f);
    Nvfp4Activation a = quantize_activation(x.data(), 1, 16, 0.5f);
    ASSERT_EQ(a.scales[0], 0x38);
    const std::vector<uint8_t> want = {7, th.at, th.below, th.above, static_cast<uint8_t>(th.at | 8),
                                       static_cast<uint8_t>(th.below | 8),
                                       static_cast<uint8_t>(th.above | 8)};
    EXPECT_EQ(codes_of(a.codes, 0, 7), want) << "threshold " << th.t;
  }
}

TEST(Nvfp4ActivationQuant, ScaleSaturatesAt448AndCodesAt6) {
  // input_scale 0.25 -> G = 4; block amax 1200 -> 4*1200/6 = 800 -> clamped to 448 (0x7E).
  std::vector<float> x = {1200, 600, -100, 300};
  x.resize(16, 0.0f);
  Nvfp4Activation a = quantize_activation(x.data(), 1, 16, 0.25f);
  EXPECT_EQ(a.scales, (std::vector<uint8_t>{0x7e}));
  // y = x * (4/448): 10.7 -> 6, 5.36 -> 6, -0.89 -> -1, 2.68 -> 3
  EXPECT_EQ(codes_of(a.codes, 0, 4), (std::vector<uint8_t>{7, 7, 0xA, 5}));
  std::vector<float> dq = dequantize_activation(a, 0.25f);
  EXPECT_EQ(dq[0], 672.0f);  // 6 * 448 * 0.25
  EXPECT_EQ(dq[2], -112.0f);
}

TEST(Nvfp4ActivationQuant, ZeroScaleBlockHasZeroCodes) {
  // input_scale 1: block amax 0.005 -> 0.005/6 < 2^-10 rounds to E4M3 0 -> sf = 0 -> codes 0,
  // even for negative inputs. An all-zero block likewise. Amax 6*2^-10 -> exactly 2^-10, a tie
  // between 0 and 2^-9 that goes to 0; one float more gives 0x01.
  std::vector<float> x(64, 0.0f);
  x[0] = 0.005f;
  x[1] = -0.004f;
  x[2] = -0.005f;
  // block 1 all zero (with a -0)
  x[17] = -0.0f;
  x[32] = 6 * 0x1p-10f;
  x[33] = -6 * 0x1p-10f;
  x[48] = std::nextafter(6 * 0x1p-10f, 1.0f);
  x[49] = -6 * 0x1p-10f;
  Nvfp4Activation a = quantize_activation(x.data(), 1, 64, 1.0f);
  EXPECT_EQ(a.scales, (std::vector<uint8_t>{0x00, 0x00, 0x00, 0x01}));
  EXPECT_EQ(codes_of(a.codes, 0, 48), std::vector<uint8_t>(48, 0));
  // Block 3: sf = 2^-9, y = x * 512: 3.0000002 -> 5 (3), -3 -> 0xD
  EXPECT_EQ(codes_of(a.codes, 48, 2), (std::vector<uint8_t>{5, 0xD}));
  std::vector<float> dq = dequantize_activation(a, 1.0f);
  for (int i = 0; i < 48; ++i) EXPECT_EQ(dq[i], 0.0f) << i;
}

TEST(Nvfp4ActivationQuant, SubnormalScale) {
  // input_scale 1: block amax 18*2^-9 -> 3*2^-9 (E4M3 0x03).
  std::vector<float> x = {18 * 0x1p-9f, -9 * 0x1p-9f};
  x.resize(16, 0.0f);
  Nvfp4Activation a = quantize_activation(x.data(), 1, 16, 1.0f);
  EXPECT_EQ(a.scales, (std::vector<uint8_t>{0x03}));
  EXPECT_EQ(codes_of(a.codes, 0, 2), (std::vector<uint8_t>{7, 0xD}));  // 6, -3
  EXPECT_EQ(activation_block_scale(18 * 0x1p-9f, 1.0f), 0x03);
}

// Found by search: x * (G/sf) gives 1.5 (code 3) where (x*G)/sf would give 2 (code 4); and
// (G*bamax)/6 gives scale 0x76 where G*(bamax*(1/6)) would give 0x77.
TEST(Nvfp4ActivationQuant, OrderSensitiveVectors) {
  {
    const float input_scale = 0x1.a18618p-13f;
    std::vector<float> x = {0x1.9p-3f, 0x1.c8aaaap-5f, 0x1.c8aaaap-5f};  // high and low nibble
    x.resize(16, 0.0f);
    Nvfp4Activation a = quantize_activation(x.data(), 1, 16, input_scale);
    EXPECT_EQ(a.scales[0], 0x72);
    EXPECT_EQ(code_at(a.codes, 1), 3);
    EXPECT_EQ(code_at(a.codes, 2), 3);
    const float g = 1.0f / input_scale, sf = e4m3_to_f32(0x72);
    EXPECT_EQ(f32_to_e2m1(x[1] * g / sf), 4);  // the order this test rules out
  }
  {
    const float input_scale = 0x1.6aaaaap-10f, bamax = 0x1.edp+0f;
    EXPECT_EQ(activation_block_scale(bamax, input_scale), 0x76);
    const float g = 1.0f / input_scale;
    EXPECT_EQ(f32_to_e4m3(g * (bamax * (1.0f / 6.0f))), 0x77);
  }
}

TEST(Nvfp4ActivationQuant, W4A4ProductTimesAlphaMatchesDequantizedDot) {
  // The kernel multiplies codes*scales of both operands and applies alpha = input_scale * s2 once;
  // dequantize_activation/dequantize_weight give the same dot product.
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> ud(-1.0f, 1.0f);
  const int64_t k = 64;
  std::vector<float> x(k), w(k);
  for (float& v : x) v = ud(rng) * 3.0f;
  for (float& v : w) v = ud(rng) * 0.1f;
  const float input_scale = 3.0f / 2688.0f;
  Nvfp4Activation qa = quantize_activation(x.data(), 1, k, input_scale);
  Nvfp4Weight qw = quantize_weight(w.data(), 1, k);
  double raw = 0, deq = 0;
  std::vector<float> dx = dequantize_activation(qa, input_scale), dw = dequantize_weight(qw);
  for (int64_t i = 0; i < k; ++i) {
    raw += static_cast<double>(e2m1_to_f32(code_at(qa.codes, i)) * e4m3_to_f32(qa.scales[i / 16])) *
           (e2m1_to_f32(code_at(qw.codes, i)) * e4m3_to_f32(qw.scales[i / 16]));
    deq += static_cast<double>(dx[i]) * dw[i];
  }
  const double alpha = static_cast<double>(input_scale) * qw.weight_scale_2;
  EXPECT_NEAR(raw * alpha, deq, 1e-6 * std::fabs(deq) + 1e-9);
}

TEST(Nvfp4ActivationQuant, BadInputsAreErrors) {
  std::vector<float> x(32, 1.0f);
  expect_error([&] { quantize_activation(x.data(), 1, 20, 1.0f); }, "k = 20");
  expect_error([&] { quantize_activation(x.data(), 2, 16, 0.0f); }, "input_scale = 0");
  expect_error([&] { quantize_activation(x.data(), 2, 16, -1.0f); }, "input_scale = -1");
  expect_error([&] { quantize_activation(x.data(), 2, 16, kNaN); }, "input_scale = nan");
  expect_error([&] { quantize_activation(x.data(), 2, 16, kInf); }, "input_scale = inf");
  expect_error([&] { quantize_activation(x.data(), 2, 16, 1e-45f); }, "overflows");
  x[20] = kNaN;
  expect_error([&] { quantize_activation(x.data(), 2, 16, 1.0f); }, "[1, 4]");
  Nvfp4Activation a;
  a.m = 1;
  a.k = 16;
  a.codes.resize(8);
  expect_error([&] { dequantize_activation(a, 1.0f); }, "needs 8 code bytes and 1 scales");
}

// ============================================================ single-block primitives

TEST(Nvfp4BlockScale, WeightRule) {
  EXPECT_EQ(weight_block_scale(0.0f, 1.0f), 0x38);          // s == 0 -> 1
  EXPECT_EQ(weight_block_scale(6.0f, 1.0f), 0x38);
  EXPECT_EQ(weight_block_scale(12.0f, 1.0f), 0x40);
  EXPECT_EQ(weight_block_scale(6000.0f, 1.0f), 0x7e);       // clamped to 448
  EXPECT_EQ(weight_block_scale(6 * 0x1p-11f, 1.0f), 0x01);  // clamped to 2^-9
  EXPECT_EQ(weight_block_scale(15 * 0x1p-9f, 1.0f), 0x02);  // 2.5 steps: tie to even
  EXPECT_EQ(weight_block_scale(21 * 0x1p-9f, 1.0f), 0x04);  // 3.5 steps: tie to even
  EXPECT_EQ(weight_block_scale(3.0f, 2.0f), 0x28);          // 3/12 = 0.25
  expect_error([] { weight_block_scale(1.0f, 0.0f); }, "weight_scale_2 = 0");
  expect_error([] { weight_block_scale(-1.0f, 1.0f); }, "block amax = -1");
}

TEST(Nvfp4BlockScale, ActivationRule) {
  EXPECT_EQ(activation_block_scale(0.0f, 1.0f), 0x00);     // no clamp from below: sf = 0
  EXPECT_EQ(activation_block_scale(6.0f, 1.0f), 0x38);
  EXPECT_EQ(activation_block_scale(3.0f, 0.5f), 0x38);
  EXPECT_EQ(activation_block_scale(1e6f, 1.0f), 0x7e);     // clamped to 448
  EXPECT_EQ(activation_block_scale(6 * 0x1p-10f, 1.0f), 0x00);  // 2^-10: tie to 0
  expect_error([] { activation_block_scale(1.0f, 0.0f); }, "input_scale = 0");
}

TEST(Nvfp4Amax, MaxAbs) {
  const float v[] = {0.5f, -3.0f, 2.0f, -0.0f};
  EXPECT_EQ(amax(v, 4), 3.0f);
  EXPECT_EQ(amax(v, 0), 0.0f);
  EXPECT_EQ(amax(v, 1), 0.5f);
}

}  // namespace
}  // namespace fp4lm::quant::nvfp4_test
