// ggml's block formats (quant/ggml_dequant.h) against a plain reading of their definitions: blocks
// encoded here from chosen scales and codes, decoded by the library, compared with d·(q − 8),
// d·q + m, d·q computed in double from the same numbers.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "common/error_of.h"
#include "core/dtype.h"
#include "io/gguf.h"
#include "quant/ggml_dequant.h"

namespace fp4lm::quant::ggml_dequant_test {
namespace {

using io::GgmlType;

template <class T>
void put(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}

std::vector<float> decode(GgmlType t, const std::vector<uint8_t>& b, size_t n) {
  std::vector<float> out(n);
  ggml_dequantize(static_cast<uint32_t>(t), b.data(), out.data(), n);
  return out;
}

constexpr int kBlocks = 9;

TEST(GgmlDequant, Q8_0IsScaleTimesSignedCode) {
  std::mt19937 rng(1);
  std::vector<uint8_t> b;
  std::vector<double> want;
  for (int blk = 0; blk < kBlocks; ++blk) {
    const uint16_t d = f32_to_f16(std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng));
    put(b, d);
    for (int j = 0; j < 32; ++j) {
      const auto q = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
      put(b, q);
      want.push_back(static_cast<double>(f16_to_f32(d)) * q);
    }
  }
  const std::vector<float> got = decode(GgmlType::Q8_0, b, want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(want[i])) << i;
}

TEST(GgmlDequant, Q4_0IsScaleTimesCodeMinus8LowNibblesFirst) {
  std::mt19937 rng(2);
  std::vector<uint8_t> b;
  std::vector<double> want(kBlocks * 32);
  for (int blk = 0; blk < kBlocks; ++blk) {
    const uint16_t d = f32_to_f16(std::uniform_real_distribution<float>(-0.1f, 0.1f)(rng));
    put(b, d);
    for (int j = 0; j < 16; ++j) {
      const int lo = static_cast<int>(rng() % 16), hi = static_cast<int>(rng() % 16);
      b.push_back(static_cast<uint8_t>(lo | (hi << 4)));
      want[blk * 32 + j] = static_cast<double>(f16_to_f32(d)) * (lo - 8);
      want[blk * 32 + 16 + j] = static_cast<double>(f16_to_f32(d)) * (hi - 8);
    }
  }
  const std::vector<float> got = decode(GgmlType::Q4_0, b, want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], static_cast<float>(want[i])) << i;
}

TEST(GgmlDequant, Q4_1IsScaleTimesCodePlusMin) {
  std::mt19937 rng(3);
  std::vector<uint8_t> b;
  std::vector<double> want(kBlocks * 32);
  for (int blk = 0; blk < kBlocks; ++blk) {
    const uint16_t d = f32_to_f16(std::uniform_real_distribution<float>(0.f, 0.02f)(rng));
    const uint16_t m = f32_to_f16(std::uniform_real_distribution<float>(-0.2f, 0.f)(rng));
    put(b, d);
    put(b, m);
    for (int j = 0; j < 16; ++j) {
      const int lo = static_cast<int>(rng() % 16), hi = static_cast<int>(rng() % 16);
      b.push_back(static_cast<uint8_t>(lo | (hi << 4)));
      want[blk * 32 + j] = static_cast<double>(f16_to_f32(d)) * lo + f16_to_f32(m);
      want[blk * 32 + 16 + j] = static_cast<double>(f16_to_f32(d)) * hi + f16_to_f32(m);
    }
  }
  const std::vector<float> got = decode(GgmlType::Q4_1, b, want.size());
  // ggml computes d*q + m in float: one float multiply-add, not the double result rounded once.
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-7 + 1e-6 * std::abs(want[i])) << i;
}

TEST(GgmlDequant, PlainTypes) {
  const std::vector<float> v = {1.5f, -2.25f, 0.f, 65504.f, 3.0e-5f};
  std::vector<uint8_t> f32(v.size() * 4), f16, bf16;
  std::memcpy(f32.data(), v.data(), f32.size());
  for (float x : v) put(f16, f32_to_f16(x)), put(bf16, f32_to_bf16(x));
  EXPECT_EQ(decode(GgmlType::F32, f32, v.size()), v);
  const std::vector<float> h = decode(GgmlType::F16, f16, v.size()), bb = decode(GgmlType::BF16, bf16, v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_EQ(h[i], f16_to_f32(f32_to_f16(v[i])));
    EXPECT_EQ(bb[i], bf16_to_f32(f32_to_bf16(v[i])));
  }
  EXPECT_EQ(h[3], 65504.f);
}

TEST(GgmlDequant, RefusesWhatItCannotDecode) {
  EXPECT_TRUE(ggml_can_dequantize(static_cast<uint32_t>(GgmlType::Q4_1)));
  EXPECT_FALSE(ggml_can_dequantize(static_cast<uint32_t>(GgmlType::Q4_K)));
  std::vector<uint8_t> b(144);
  std::vector<float> out(256);
  EXPECT_EQ(test::error_of([&] { ggml_dequantize(12, b.data(), out.data(), 256); }),
            "ggml type Q4_K (12) cannot be dequantized (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)");
  EXPECT_EQ(test::error_of([&] { ggml_dequantize(77, b.data(), out.data(), 32); }),
            "ggml type unknown (77) cannot be dequantized (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)");
  EXPECT_EQ(test::error_of([&] { ggml_dequantize(8, b.data(), out.data(), 33); }),
            "ggml type Q8_0: 33 elements is not a whole number of 32-element blocks");
}

}  // namespace
}  // namespace fp4lm::quant::ggml_dequant_test
