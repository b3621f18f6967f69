// pack_int4 (int4_packed.h), the repacked int4 layout of the fast W4A16 kernels: padding, the
// lanes' group offsets for groups that do not divide the chunk, the zero-point forms, the AVX2
// form's 2^-7 scales, and the groups it refuses.
#include <gtest/gtest.h>

#include <numeric>

#include "common/error_of.h"
#include "kernels/cpu/int4_packed.h"

namespace fp4lm::kernels::cpu::int4_packed_test {
namespace {

Int4Matrix matrix(int64_t n, int64_t k, int64_t group, float zero) {
  Int4Matrix m;
  m.n = n;
  m.k = k;
  m.group = group;
  for (int64_t i = 0; i < n * k / 2; ++i) m.codes.push_back(static_cast<uint8_t>(i * 37 + 11));
  for (int64_t g = 0; g < n * (k / group); ++g) {
    m.scales.push_back(0.5f + static_cast<float>(g));
    m.zeros.push_back(zero < 0 ? static_cast<float>(g % 17) : zero);
  }
  return m;
}

TEST(Int4Packed, RowsArePaddedToWholeChunksWithZeroWeightNibbles) {
  const Int4Matrix m = matrix(3, 96, 32, 8.0f);
  const Int4Packed p = pack_int4(m, 256);
  EXPECT_EQ(p.kp, 256);
  ASSERT_EQ(p.codes.size(), 3u * 128);
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t b = 0; b < 128; ++b)
      EXPECT_EQ(p.codes[static_cast<size_t>(r * 128 + b)], b < 48 ? m.codes[static_cast<size_t>(r * 48 + b)] : 0x88)
          << r << " " << b;
  EXPECT_TRUE(p.symmetric);
  EXPECT_TRUE(p.zeros.empty());
  EXPECT_EQ(p.scales.size(), 3u * 3 + 16);
}

TEST(Int4Packed, LaneGroupsOfGroupsThatDoNotDivideTheChunk) {
  // k 288, group 48, chunk 256: lane i of chunk 0 is columns 16i.., group i / 3; chunk 1 starts in
  // group 5 and its lanes past column 287 take the last group (5).
  const Int4Packed p = pack_int4(matrix(2, 288, 48, -1), 256);
  ASSERT_EQ(p.chunk_group.size(), 2u);
  EXPECT_EQ(p.chunk_group[0], 0);
  EXPECT_EQ(p.chunk_group[1], 5);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(p.lane_group[static_cast<size_t>(i)], i / 3) << i;
    EXPECT_EQ(p.lane_group[static_cast<size_t>(16 + i)], 0) << i;
  }
  ASSERT_EQ(p.zeros.size(), 12u + 16);
  for (size_t g = 0; g < 12; ++g) EXPECT_EQ(p.zeros[g], g % 17) << g;
  EXPECT_FALSE(p.uniform);
}

TEST(Int4Packed, Avx2HalvesZeroBytesAndScaledScales) {
  // k 288, group 96, chunk 64: chunk 1 (columns 64-127) has halves in groups 0 and 1.
  const Int4Matrix m = matrix(2, 288, 96, -1);
  const Int4Packed p = pack_int4(m, 64);
  EXPECT_EQ(p.kp, 320);
  ASSERT_EQ(p.chunk_group.size(), 5u);
  const std::vector<int32_t> first = {0, 0, 1, 2, 2}, halves = {0, 0, 0, 1, 0, 0, 0, 0, 0, 0};
  for (size_t c = 0; c < 5; ++c) EXPECT_EQ(p.chunk_group[c], first[c]) << c;
  for (size_t h = 0; h < 10; ++h) EXPECT_EQ(p.lane_group[h], halves[h]) << h;
  for (size_t g = 0; g < 6; ++g) {
    EXPECT_EQ(p.scales[g], m.scales[g] * 0x1p-7f) << g;
    EXPECT_EQ(p.zeros[g], static_cast<uint8_t>(m.zeros[g])) << g;
  }
  EXPECT_TRUE(pack_int4(matrix(1, 256, 128, 8.0f), 64).uniform);
  EXPECT_NE(test::error_of([&] { pack_int4(matrix(1, 96, 48, 8.0f), 64); }).find("group 48 is not a multiple of 32"),
            std::string::npos);
}

}  // namespace
}  // namespace fp4lm::kernels::cpu::int4_packed_test
