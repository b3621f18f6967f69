// Exhaustive tests of the scalar dtype conversions (core/dtype.h). Each format is checked against
// an independent oracle: a table of every representable value, decoded with ldexp in double, and
// a nearest-value search with ties going to the even code (IEEE round-to-nearest-even).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "core/cpu_features.h"

namespace fp4lm::dtype_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Independent decoders, written from the format definitions rather than bit tricks.
double decode_ieee(uint32_t code, int exp_bits, int man_bits) {
  const uint32_t man = code & ((1u << man_bits) - 1);
  const uint32_t exp = (code >> man_bits) & ((1u << exp_bits) - 1);
  const bool neg = (code >> (man_bits + exp_bits)) & 1u;
  const int bias = (1 << (exp_bits - 1)) - 1;
  double v;
  if (exp == (1u << exp_bits) - 1)
    v = man ? std::numeric_limits<double>::quiet_NaN() : std::numeric_limits<double>::infinity();
  else if (exp == 0)
    v = std::ldexp(static_cast<double>(man), 1 - bias - man_bits);
  else
    v = std::ldexp(1.0 + std::ldexp(static_cast<double>(man), -man_bits), static_cast<int>(exp) - bias);
  return neg ? -v : v;
}
double decode_fp16(uint16_t h) { return decode_ieee(h, 5, 10); }
double decode_bf16(uint16_t h) { return decode_ieee(h, 8, 7); }
double decode_e4m3(uint8_t c) {
  if ((c & 0x7f) == 0x7f) return std::numeric_limits<double>::quiet_NaN();  // no inf in E4M3FN
  const uint32_t exp = (c >> 3) & 0xf, man = c & 7;
  double v = exp == 0 ? std::ldexp(static_cast<double>(man), -9)
                      : std::ldexp(1.0 + man / 8.0, static_cast<int>(exp) - 7);
  return (c & 0x80) ? -v : v;
}

// Ascending magnitudes of a format's non-negative codes 0..top, value(i) = table[i].
// Returns the code of the value nearest |x| (ties to the even code); |x| >= table.back() -> top.
uint32_t nearest_even(double ax, const std::vector<double>& table) {
  if (ax >= table.back()) return static_cast<uint32_t>(table.size() - 1);
  auto hi = std::upper_bound(table.begin(), table.end(), ax);
  uint32_t h = static_cast<uint32_t>(hi - table.begin()), l = h - 1;
  double dl = ax - table[l], dh = table[h] - ax;
  if (dl < dh) return l;
  if (dh < dl) return h;
  return (l % 2 == 0) ? l : h;
}

// fp16 codes 0..0x7c00 where 0x7c00 (inf) stands at 65536: IEEE overflow is "rounds past max".
const std::vector<double>& fp16_table() {
  static const std::vector<double> t = [] {
    std::vector<double> v;
    for (uint32_t h = 0; h < 0x7c00; ++h) v.push_back(decode_fp16(static_cast<uint16_t>(h)));
    v.push_back(65536.0);
    return v;
  }();
  return t;
}
const std::vector<double>& bf16_table() {
  static const std::vector<double> t = [] {
    std::vector<double> v;
    for (uint32_t h = 0; h < 0x7f80; ++h) v.push_back(decode_bf16(static_cast<uint16_t>(h)));
    v.push_back(std::ldexp(1.0, 128));
    return v;
  }();
  return t;
}
// E4M3FN saturates: the table stops at 448 (0x7e) and everything above maps there.
const std::vector<double>& e4m3_table() {
  static const std::vector<double> t = [] {
    std::vector<double> v;
    for (uint32_t c = 0; c <= 0x7e; ++c) v.push_back(decode_e4m3(static_cast<uint8_t>(c)));
    return v;
  }();
  return t;
}

uint16_t oracle_f16(float f) {
  if (std::isnan(f)) return 0x7e00;
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  return static_cast<uint16_t>(sign | nearest_even(std::fabs(static_cast<double>(f)), fp16_table()));
}
uint16_t oracle_bf16(float f) {
  uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  return static_cast<uint16_t>(sign | nearest_even(std::fabs(static_cast<double>(f)), bf16_table()));
}
uint8_t oracle_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  return static_cast<uint8_t>(sign | nearest_even(std::fabs(static_cast<double>(f)), e4m3_table()));
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

// Random floats: uniformly random bit patterns (every exponent, NaN and inf included) half the
// time, and values spread over [-2^-30, 2^20] on a log scale the other half.
std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> e(-30.0f, 20.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    float x = (i % 2) ? from_bits(rng()) : std::exp2(e(rng));
    v[i] = (rng() & 1) ? -x : x;
  }
  return v;
}

// ---------------------------------------------------------------- dtype table

TEST(DTypeTable, NamesSizesAndParsingRoundTrip) {
  const std::pair<DType, size_t> all[] = {
      {DType::BOOL, 1}, {DType::U8, 1},  {DType::I8, 1},  {DType::U16, 2},     {DType::I16, 2},
      {DType::F16, 2},  {DType::BF16, 2}, {DType::U32, 4}, {DType::I32, 4},    {DType::F32, 4},
      {DType::U64, 8},  {DType::I64, 8}, {DType::F64, 8}, {DType::F8_E4M3, 1}, {DType::F8_E5M2, 1}};
  for (auto [t, size] : all) {
    EXPECT_EQ(dtype_size(t), size) << dtype_name(t);
    EXPECT_EQ(parse_dtype(dtype_name(t)), t) << dtype_name(t);
  }
  EXPECT_EQ(dtype_name(DType::F8_E4M3), "F8_E4M3");
  EXPECT_EQ(dtype_torch_name(DType::BF16), "bfloat16");
  EXPECT_EQ(dtype_torch_name(DType::F16), "float16");
  EXPECT_EQ(dtype_torch_name(DType::F32), "float32");
  EXPECT_FALSE(parse_dtype("F4"));
  EXPECT_FALSE(parse_dtype("bf16"));
}

// ---------------------------------------------------------------- E4M3FN

TEST(E4M3, KnownCodes) {
  EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
  EXPECT_TRUE(std::signbit(e4m3_to_f32(0x80)));
  EXPECT_EQ(e4m3_to_f32(0x80), 0.0f);
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1p-9f);   // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x07), 7 * 0x1p-9f);  // largest subnormal
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1p-6f);   // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x3f), 1.875f);
  EXPECT_EQ(e4m3_to_f32(0x40), 2.0f);
  EXPECT_EQ(e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(e4m3_to_f32(0xfe), -448.0f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
  EXPECT_EQ(e4m3_to_f32(0x78), 256.0f);  // exponent 15 is finite in E4M3FN (no inf)
}

TEST(E4M3, All256CodesDecodeExactly) {
  for (int c = 0; c < 256; ++c) {
    float f = e4m3_to_f32(static_cast<uint8_t>(c));
    double want = decode_e4m3(static_cast<uint8_t>(c));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f)) << "code " << c;
    } else {
      EXPECT_EQ(static_cast<double>(f), want) << "code " << c;
      EXPECT_EQ(std::signbit(f), (c & 0x80) != 0) << "code " << c;
    }
  }
}

TEST(E4M3, All256CodesReencodeToThemselves) {
  int checked = 0;
  for (int c = 0; c < 256; ++c) {
    if (c == 0x7f || c == 0xff) continue;  // the NaN codes; NaN encodes to 0x7f, tested below
    EXPECT_EQ(f32_to_e4m3(e4m3_to_f32(static_cast<uint8_t>(c))), c) << "code " << c;
    ++checked;
  }
  EXPECT_EQ(checked, 254);
}

// Between every pair of adjacent codes (subnormals, the 2^-6 boundary, up to 416/448), the exact
// midpoint goes to the even code and the floats right beside it go to the nearer code.
TEST(E4M3, EveryTieRoundsToEvenAndNeighboursToNearest) {
  for (uint8_t c = 0; c < 0x7e; ++c) {
    const uint8_t d = c + 1;
    const float lo = e4m3_to_f32(c), hi = e4m3_to_f32(d);
    const float mid = static_cast<float>((static_cast<double>(lo) + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (static_cast<double>(lo) + hi) / 2);  // exact in float
    const uint8_t even = (c % 2 == 0) ? c : d;
    for (float sgn : {1.0f, -1.0f}) {
      const uint8_t s = sgn < 0 ? 0x80 : 0;
      EXPECT_EQ(f32_to_e4m3(sgn * mid), s | even) << "tie " << lo << " / " << hi;
      EXPECT_EQ(f32_to_e4m3(sgn * std::nextafter(mid, 0.0f)), s | c) << "below tie " << mid;
      EXPECT_EQ(f32_to_e4m3(sgn * std::nextafter(mid, kInf)), s | d) << "above tie " << mid;
    }
  }
  // The named boundaries, spelled out.
  EXPECT_EQ(f32_to_e4m3(0x1p-10f), 0x00);           // half the smallest subnormal: tie to 0
  EXPECT_EQ(f32_to_e4m3(std::nextafter(0x1p-10f, 1.0f)), 0x01);
  EXPECT_EQ(f32_to_e4m3(3 * 0x1p-10f), 0x02);       // 1.5 steps: tie to 2 steps
  EXPECT_EQ(f32_to_e4m3(15 * 0x1p-10f), 0x08);      // between 7*2^-9 and 2^-6: tie to 2^-6
  EXPECT_EQ(f32_to_e4m3(std::nextafter(15 * 0x1p-10f, 0.0f)), 0x07);
  EXPECT_EQ(f32_to_e4m3(432.0f), 0x7e);             // between 416 and 448: tie to 448 (even)
  EXPECT_EQ(f32_to_e4m3(std::nextafter(432.0f, 0.0f)), 0x7d);
}

TEST(E4M3, SaturatesToMax) {
  for (float v : {448.0f, std::nextafter(448.0f, kInf), 449.0f, 464.0f, 480.0f, 1000.0f, 1e9f,
                  std::numeric_limits<float>::max(), kInf}) {
    EXPECT_EQ(f32_to_e4m3(v), 0x7e) << v;
    EXPECT_EQ(f32_to_e4m3(-v), 0xfe) << -v;
  }
}

TEST(E4M3, NaNEncodesTo0x7F) {
  EXPECT_EQ(f32_to_e4m3(kNaN), 0x7f);
  EXPECT_EQ(f32_to_e4m3(-kNaN), 0x7f);
  EXPECT_EQ(f32_to_e4m3(from_bits(0x7f800001u)), 0x7f);  // signalling NaN
}

TEST(E4M3, SignedZeroAndUnderflow) {
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(1e-30f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-1e-30f), 0x80);
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(E4M3, RandomFloatsMatchOracle) {
  for (float f : random_floats(200000, 1)) {
    if (std::isnan(f)) {
      EXPECT_EQ(f32_to_e4m3(f), 0x7f);
      continue;
    }
    ASSERT_EQ(f32_to_e4m3(f), oracle_e4m3(f)) << "f = " << f << " bits " << std::hex << bits(f);
  }
  // Dense sweep of the whole E4M3 range in small steps.
  for (float f = 0x1p-12f; f < 500.0f; f *= 1.0001f) ASSERT_EQ(f32_to_e4m3(f), oracle_e4m3(f)) << f;
}

// ---------------------------------------------------------------- E2M1

TEST(E2M1, CodeTable) {
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_to_f32(static_cast<uint8_t>(c)), want[c]) << c;
    EXPECT_EQ(std::signbit(e2m1_to_f32(static_cast<uint8_t>(c))), c >= 8) << c;
    if (c != 8) {  // every code but -0 re-encodes
      EXPECT_EQ(f32_to_e2m1(want[c]), c) << c;
    }
  }
  // -0.0 is not "< 0", so it encodes as +0; a negative value that rounds to zero keeps the sign.
  EXPECT_EQ(f32_to_e2m1(-0.0f), 0x0);
  EXPECT_EQ(f32_to_e2m1(-0.1f), 0x8);
  EXPECT_EQ(f32_to_e2m1(-0.25f), 0x8);
  EXPECT_EQ(f32_to_e2m1(-1e-30f), 0x8);
}

// ModelOpt's thresholds, at and beside each one: <=0.25->0, <0.75->0.5, <=1.25->1, <1.75->1.5,
// <=2.5->2, <3.5->3, <=5->4, else 6.
TEST(E2M1, Thresholds) {
  struct Case { float t; uint8_t at, below, above; };
  const Case cases[] = {{0.25f, 0, 0, 1}, {0.75f, 2, 1, 2}, {1.25f, 2, 2, 3}, {1.75f, 4, 3, 4},
                        {2.5f, 4, 4, 5},  {3.5f, 6, 5, 6},  {5.0f, 6, 6, 7}};
  for (const Case& c : cases) {
    EXPECT_EQ(f32_to_e2m1(c.t), c.at) << c.t;
    EXPECT_EQ(f32_to_e2m1(std::nextafter(c.t, 0.0f)), c.below) << c.t;
    EXPECT_EQ(f32_to_e2m1(std::nextafter(c.t, kInf)), c.above) << c.t;
    EXPECT_EQ(f32_to_e2m1(-c.t), c.at | 8) << -c.t;
    EXPECT_EQ(f32_to_e2m1(-std::nextafter(c.t, 0.0f)), c.below | 8) << -c.t;
    EXPECT_EQ(f32_to_e2m1(-std::nextafter(c.t, kInf)), c.above | 8) << -c.t;
  }
  EXPECT_EQ(f32_to_e2m1(6.0f), 7);
  EXPECT_EQ(f32_to_e2m1(7.0f), 7);   // saturates
  EXPECT_EQ(f32_to_e2m1(1e30f), 7);
  EXPECT_EQ(f32_to_e2m1(kInf), 7);
  EXPECT_EQ(f32_to_e2m1(-kInf), 15);
}

// The thresholds are exactly round-to-nearest-even onto the E2M1 grid: check against the oracle.
TEST(E2M1, ThresholdsEqualRoundToNearestEven) {
  const std::vector<double> grid(std::begin(kE2M1Values), std::end(kE2M1Values));
  for (float y = 0.0f; y < 8.0f; y = std::nextafter(y, kInf) + 1e-4f) {
    ASSERT_EQ(f32_to_e2m1(y), nearest_even(y, grid)) << y;
  }
  for (size_t i = 0; i + 1 < grid.size(); ++i) {
    float mid = static_cast<float>((grid[i] + grid[i + 1]) / 2);
    EXPECT_EQ(f32_to_e2m1(mid), nearest_even(mid, grid)) << mid;
  }
}

// ---------------------------------------------------------------- bf16

TEST(BF16, All65536PatternsRoundTripThroughF32) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32(static_cast<uint16_t>(h));
    const double want = decode_bf16(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(f)))) << "NaN must stay NaN: " << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
  }
}

TEST(BF16, EveryTieRoundsToEven) {
  // Adjacent pairs (h, h+1) for every non-negative finite h, including max -> inf.
  for (uint32_t h = 0; h < 0x7f80; ++h) {
    const uint32_t lo = h << 16, mid = lo + 0x8000u;  // float bits halfway between h and h+1
    const uint16_t even = static_cast<uint16_t>((h % 2 == 0) ? h : h + 1);
    for (uint32_t s : {0u, 0x80000000u}) {
      const uint16_t sh = static_cast<uint16_t>(s >> 16);
      ASSERT_EQ(f32_to_bf16(from_bits(s | mid)), sh | even) << std::hex << h;
      ASSERT_EQ(f32_to_bf16(from_bits(s | (mid - 1))), sh | h) << std::hex << h;
      ASSERT_EQ(f32_to_bf16(from_bits(s | (mid + 1))), sh | (h + 1)) << std::hex << h;
    }
  }
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds past max: inf
  EXPECT_EQ(f32_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-kInf), 0xff80);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);  // tie: 1.0 is even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie: 1+2^-6 is even
}

TEST(BF16, NaNStaysNaN) {
  for (uint32_t u : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fffffffu, 0xff800001u}) {
    uint16_t h = f32_to_bf16(from_bits(u));
    EXPECT_TRUE(std::isnan(bf16_to_f32(h))) << std::hex << u << " -> " << h;
    EXPECT_EQ(h & 0x8000, (u >> 16) & 0x8000) << "sign kept";
  }
}

TEST(BF16, RandomFloatsMatchOracle) {
  for (float f : random_floats(200000, 2)) {
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_bf16(f), oracle_bf16(f)) << f << " bits " << std::hex << bits(f);
  }
}

TEST(BF16, BulkEqualsScalar) {
  std::vector<float> src = random_floats(1003, 3);
  std::vector<uint16_t> h(src.size());
  f32_to_bf16_n(src.data(), h.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(h[i], f32_to_bf16(src[i])) << i;
  std::vector<float> back(src.size());
  bf16_to_f32_n(h.data(), back.data(), h.size());
  for (size_t i = 0; i < src.size(); ++i) ASSERT_EQ(bits(back[i]), bits(bf16_to_f32(h[i]))) << i;
}

// ---------------------------------------------------------------- fp16

TEST(FP16, All65536PatternsRoundTripThroughF32) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = f16_to_f32(static_cast<uint16_t>(h));
    const double want = decode_fp16(static_cast<uint16_t>(h));
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      const uint16_t back = f32_to_f16(f);
      ASSERT_TRUE(std::isnan(f16_to_f32(back))) << "NaN must stay NaN: " << std::hex << h;
      ASSERT_EQ(back & 0x8000, h & 0x8000) << "sign kept: " << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(FP16, EveryTieRoundsToEven) {
  // Adjacent pairs (h, h+1) for every non-negative finite h: subnormals, the subnormal/normal
  // boundary, every binade, and 65504 -> inf (0x7c00 sits at 65536 for rounding purposes).
  const auto& t = fp16_table();
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    const double mid_d = (t[h] + t[h + 1]) / 2;
    const float mid = static_cast<float>(mid_d);
    ASSERT_EQ(static_cast<double>(mid), mid_d);
    const uint16_t even = static_cast<uint16_t>((h % 2 == 0) ? h : h + 1);
    for (float sgn : {1.0f, -1.0f}) {
      const uint16_t s = sgn < 0 ? 0x8000 : 0;
      ASSERT_EQ(f32_to_f16(sgn * mid), s | even) << "tie above " << std::hex << h;
      ASSERT_EQ(f32_to_f16(sgn * std::nextafter(mid, 0.0f)), s | h) << std::hex << h;
      ASSERT_EQ(f32_to_f16(sgn * std::nextafter(mid, kInf)), s | (h + 1)) << std::hex << h;
    }
  }
}

TEST(FP16, SubnormalsOverflowAndSpecials) {
  EXPECT_EQ(f16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x03ff), 1023 * 0x1p-24f);
  EXPECT_EQ(f16_to_f32(0x0400), 0x1p-14f);
  EXPECT_EQ(f16_to_f32(0x8001), -0x1p-24f);
  EXPECT_EQ(f32_to_f16(0x1p-24f), 0x0001);
  EXPECT_EQ(f32_to_f16(0x1p-25f), 0x0000);  // tie between 0 and 2^-24: 0 is even
  EXPECT_EQ(f32_to_f16(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(f32_to_f16(3 * 0x1p-25f), 0x0002);
  EXPECT_EQ(f32_to_f16(2047 * 0x1p-25f), 0x0400);  // max subnormal/min normal tie -> 0x400
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-10f), 0x8000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);  // overflow to inf
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(f32_to_f16(kInf), 0x7c00);
  EXPECT_EQ(f32_to_f16(-kInf), 0xfc00);
  EXPECT_EQ(f16_to_f32(0x7c00), kInf);
  EXPECT_EQ(f16_to_f32(0xfc00), -kInf);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(kNaN))));
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(from_bits(0x7f800001u)))));  // tiny payload
}

TEST(FP16, RandomFloatsMatchOracle) {
  for (float f : random_floats(200000, 4)) {
    uint16_t h = f32_to_f16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(std::isnan(f16_to_f32(h)));
      continue;
    }
    ASSERT_EQ(h, oracle_f16(f)) << f << " bits " << std::hex << bits(f);
  }
}

// The F16C path (when the CPU has it) must agree bit for bit with the scalar one. Lengths that
// are not multiples of 8 exercise the scalar tails too.
TEST(FP16, BulkPathEqualsScalarForAllPatterns) {
  if (!cpu_features().has(CpuFeature::f16c)) std::cout << "[ note ] no F16C: bulk path is the scalar loop\n";
  std::vector<uint16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<uint16_t>(h);
  std::vector<float> f(all.size());
  f16_to_f32_n(all.data(), f.data(), all.size());
  for (uint32_t h = 0; h < 65536; ++h)
    ASSERT_EQ(bits(f[h]), bits(f16_to_f32(all[h]))) << "f16 -> f32 of " << std::hex << h;

  std::vector<uint16_t> back(all.size());
  f32_to_f16_n(f.data(), back.data(), f.size());
  for (uint32_t h = 0; h < 65536; ++h)
    ASSERT_EQ(back[h], f32_to_f16(f[h])) << "f32 -> f16 of " << std::hex << bits(f[h]);

  for (size_t n : {size_t{1}, size_t{7}, size_t{9}, size_t{15}}) {
    std::vector<float> g(n);
    f16_to_f32_n(all.data() + 0x3c00, g.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits(g[i]), bits(f16_to_f32(all[0x3c00 + i])));
  }
}

TEST(FP16, BulkPathEqualsScalarForRandomFloats) {
  std::vector<float> src = random_floats(300001, 5);
  // Plus every tie and its neighbours, where rounding differences would show.
  const auto& t = fp16_table();
  for (uint32_t h = 0; h < 0x7c00; h += 1) {
    float mid = static_cast<float>((t[h] + t[h + 1]) / 2);
    src.insert(src.end(), {mid, -mid, std::nextafter(mid, 0.0f), std::nextafter(mid, kInf)});
  }
  std::vector<uint16_t> bulk(src.size());
  f32_to_f16_n(src.data(), bulk.data(), src.size());
  for (size_t i = 0; i < src.size(); ++i)
    ASSERT_EQ(bulk[i], f32_to_f16(src[i])) << "f = " << src[i] << " bits " << std::hex << bits(src[i]);
}

}  // namespace
}  // namespace fp4lm::dtype_test
