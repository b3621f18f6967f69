// KvCache::read_f32: the one reader of cached rows as float32 that MLA, the DSA and lightning
// indexers and block-sparse attention share — every storage form gives back what store() kept
// (the dtype's rounding, E4M3 × its scale, a quantized format's dequantization), rows as stored.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "common/error_of.h"
#include "core/dtype.h"
#include "model/state/kv_cache.h"

namespace fp4lm::model {
namespace {

std::vector<float> random_rows(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.3f);
  std::vector<float> x(n);
  for (float& v : x) v = d(rng);
  return x;
}

// What a dtype keeps of x, computed from the core conversions (not through the cache).
float kept(float x, DType t, float scale) {
  if (t == DType::F8_E4M3) return e4m3_to_f32(f32_to_e4m3(x / scale)) * scale;
  uint8_t buf[4];
  from_f32_n(&x, t, buf, 1);
  float y = 0;
  to_f32_n(buf, t, &y, 1);
  return y;
}

TEST(KvCacheRead, EveryDtypeGivesBackWhatStoreKept) {
  const int64_t heads = 2, hd = 8, cap = 5;
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8_E4M3}) {
    const float ks = t == DType::F8_E4M3 ? 0.01f : 1.0f, vs = t == DType::F8_E4M3 ? 0.02f : 1.0f;
    KvCache cache({KvSlotShape{.kv_heads = heads, .head_dim = hd, .k_scale = ks, .v_scale = vs}}, cap, cap, t);
    std::vector<float> k = random_rows(static_cast<size_t>(cap * heads * hd), 1);
    std::vector<float> v = random_rows(static_cast<size_t>(cap * heads * hd), 2);
    for (int64_t p = 0; p < cap; ++p) cache.store(0, p, k.data() + p * heads * hd, v.data() + p * heads * hd);
    for (int kv = 0; kv < 2; ++kv)
      for (int64_t h = 0; h < heads; ++h) {
        std::vector<float> got(static_cast<size_t>(3 * hd));
        cache.read_f32(0, kv, h, 1, 3, got.data());  // rows 1..3
        for (int64_t r = 0; r < 3; ++r)
          for (int64_t c = 0; c < hd; ++c) {
            const std::vector<float>& src = kv == 0 ? k : v;
            const float want = kept(src[((1 + r) * heads + h) * hd + c], t, kv == 0 ? ks : vs);
            ASSERT_EQ(got[r * hd + c], want) << dtype_name(t) << " kv " << kv << " head " << h << " row " << 1 + r;
          }
      }
  }
}

TEST(KvCacheRead, AQuantizedSlotReadsAsItsDequantization) {
  const int64_t hd = 32, cap = 4;
  KvCache cache({KvSlotShape{.kv_heads = 1, .head_dim = hd, .k_scale = 0.01f, .v_scale = 0.01f,
                             .quant = KvQuant::int8}},
                cap, cap, DType::BF16);
  std::vector<float> k = random_rows(static_cast<size_t>(cap * hd), 3), v = random_rows(static_cast<size_t>(cap * hd), 4);
  for (int64_t p = 0; p < cap; ++p) cache.store(0, p, k.data() + p * hd, v.data() + p * hd);
  std::vector<float> got(static_cast<size_t>(cap * hd)), want(got.size());
  cache.read_f32(0, 1, 0, 0, cap, got.data());
  cache.dequantize(0, 1, 0, 0, cap, want.data());
  EXPECT_EQ(got, want);
  // And it is the values stored within half an int8 step (the scale 0.01; |v| < 1.27, no clamping).
  double err = 0;
  for (size_t i = 0; i < got.size(); ++i) err = std::max(err, static_cast<double>(std::abs(got[i] - v[i])));
  EXPECT_LE(err, 0.005 + 1e-6);
  EXPECT_GT(err, 0.0);
}

TEST(KvCacheRead, AWindowedSlotIsReadByRowAsStored) {
  const int64_t hd = 4;
  // window 2, one row per step: a ring of 2 rows; position 2 lands in row 0.
  KvCache cache({KvSlotShape{.kv_heads = 1, .head_dim = hd, .window = 2}}, 6, 1, DType::F32);
  ASSERT_EQ(cache.rows(0), 2);
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, c = {9, 10, 11, 12};
  cache.store(0, 0, a.data(), a.data());
  cache.store(0, 1, b.data(), b.data());
  cache.store(0, 2, c.data(), c.data());
  std::vector<float> got(8);
  cache.read_f32(0, 0, 0, 0, 2, got.data());
  EXPECT_EQ(got, (std::vector<float>{9, 10, 11, 12, 5, 6, 7, 8}));
}

TEST(KvCacheRead, RowsHeadsOrPlanesOutsideTheSlotAreNamed) {
  KvCache cache({KvSlotShape{.kv_heads = 1, .head_dim = 4, .key_only = true}}, 3, 3, DType::BF16);
  std::vector<float> dst(16);
  EXPECT_NE(test::error_of([&] { cache.read_f32(0, 0, 0, 2, 2, dst.data()); }).find("no rows [2, 4) of head 0"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { cache.read_f32(0, 0, 1, 0, 1, dst.data()); }).find("of head 1"), std::string::npos);
  // A key-only slot (MLA's latent) has no value plane.
  EXPECT_NE(test::error_of([&] { cache.read_f32(0, 1, 0, 0, 1, dst.data()); }).find("plane 1"), std::string::npos);
}

}  // namespace
}  // namespace fp4lm::model
