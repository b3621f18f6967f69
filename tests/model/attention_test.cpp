// The attention core against a naive loop, for float32 and 16-bit KV caches, grouped heads and
// batches that start mid-sequence; and the KV cache's storage rules.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/error.h"
#include "model/layers/attention.h"
#include "model/state/kv_cache.h"

namespace fp4lm::model::attention_test {
namespace {

std::vector<float> randn(size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

float round_to(float x, DType t) {
  if (t == DType::BF16) return bf16_to_f32(f32_to_bf16(x));
  if (t == DType::F16) return f16_to_f32(f32_to_f16(x));
  return x;
}

class CausalAttentionTest : public ::testing::TestWithParam<DType> {};

TEST_P(CausalAttentionTest, MatchesNaiveLoop) {
  const DType dt = GetParam();
  const int64_t layers = 2, heads = 6, kvh = 2, hd = 12, len = 70, pos0 = 66, m = len - pos0;
  std::mt19937 rng(3);
  KvCache cache(layers, kvh, hd, 80, dt);
  auto k = randn(len * kvh * hd, rng), v = randn(len * kvh * hd, rng), q = randn(m * heads * hd, rng);
  for (int64_t t = 0; t < len; ++t) cache.store(1, t, k.data() + t * kvh * hd, v.data() + t * kvh * hd);
  std::vector<float> out(m * heads * hd);
  causal_attention(cache, 1, q.data(), m, pos0, heads, out.data());
  for (int64_t i = 0; i < m; ++i)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / (heads / kvh), n = pos0 + i + 1;  // token i sees positions [0, pos0 + i]
      std::vector<double> s(n);
      double mx = -1e300, sum = 0;
      for (int64_t t = 0; t < n; ++t) {
        double d = 0;
        for (int64_t j = 0; j < hd; ++j)
          d += static_cast<double>(q[(i * heads + h) * hd + j]) * round_to(k[(t * kvh + g) * hd + j], dt);
        s[t] = d / std::sqrt(static_cast<double>(hd));
        mx = std::max(mx, s[t]);
      }
      for (double& x : s) sum += x = std::exp(x - mx);
      for (int64_t j = 0; j < hd; ++j) {
        double want = 0;
        for (int64_t t = 0; t < n; ++t) want += s[t] / sum * round_to(v[(t * kvh + g) * hd + j], dt);
        EXPECT_NEAR(out[(i * heads + h) * hd + j], want, 2e-5) << "token " << i << " head " << h << " dim " << j;
      }
    }
}

INSTANTIATE_TEST_SUITE_P(KvDtypes, CausalAttentionTest, ::testing::Values(DType::F32, DType::BF16, DType::F16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// An FP8 cache stores e4m3(x / scale) per layer and attends over code × scale: exactly what a
// float32 cache holding those dequantized values gives.
TEST(CausalAttention, Fp8CacheIsTheFloat32CacheOfItsDequantizedValues) {
  const int64_t layers = 2, heads = 4, kvh = 2, hd = 8, len = 20, m = 3, pos0 = len - m;
  std::mt19937 rng(5);
  KvCache f8(layers, kvh, hd, 32, DType::F8_E4M3, {0.5f, 0.01f}, {0.25f, 0.02f}), f32(layers, kvh, hd, 32, DType::F32);
  EXPECT_EQ(f8.bytes() * 4, f32.bytes());
  auto k = randn(len * kvh * hd, rng), v = randn(len * kvh * hd, rng), q = randn(m * heads * hd, rng);
  for (int64_t t = 0; t < len; ++t) {
    const float* kt = k.data() + t * kvh * hd;
    const float* vt = v.data() + t * kvh * hd;
    f8.store(1, t, kt, vt);
    std::vector<float> kd(kvh * hd), vd(kvh * hd);
    for (int64_t i = 0; i < kvh * hd; ++i) {
      kd[i] = e4m3_to_f32(f32_to_e4m3(kt[i] / 0.01f)) * 0.01f;
      vd[i] = e4m3_to_f32(f32_to_e4m3(vt[i] / 0.02f)) * 0.02f;
    }
    f32.store(1, t, kd.data(), vd.data());
    EXPECT_EQ(f8.keys(1, 1)[t * hd], f32_to_e4m3(kt[hd] / 0.01f));
  }
  std::vector<float> a(m * heads * hd), b(a.size());
  causal_attention(f8, 1, q.data(), m, pos0, heads, a.data());
  causal_attention(f32, 1, q.data(), m, pos0, heads, b.data());
  EXPECT_EQ(a, b);
  EXPECT_THROW(KvCache(1, 1, 2, 4, DType::F8_E4M3, {0.0f}, {1.0f}), Error);  // scale must be > 0
  EXPECT_THROW(KvCache(2, 1, 2, 4, DType::F8_E4M3, {1.0f}, {1.0f}), Error);  // one per layer
  EXPECT_THROW(KvCache(1, 1, 2, 4, DType::BF16, {1.0f}, {1.0f}), Error);     // FP8 only
}

TEST(CausalAttention, FirstPositionReturnsItsOwnValue) {
  KvCache cache(1, 1, 4, 4, DType::F32);
  const float k[4] = {1, 2, 3, 4}, v[4] = {0.5f, -1, 2, 8}, q[8] = {3, 1, 4, 1, 5, 9, 2, 6};
  cache.store(0, 0, k, v);
  float out[8];
  causal_attention(cache, 0, q, 1, 0, 2, out);
  for (int h = 0; h < 2; ++h)
    for (int j = 0; j < 4; ++j) EXPECT_FLOAT_EQ(out[h * 4 + j], v[j]);
}

TEST(CausalAttention, RejectsPositionsBeyondCapacity) {
  KvCache cache(1, 1, 4, 4, DType::F32);
  std::vector<float> q(4 * 2), out(q.size());
  EXPECT_THROW(causal_attention(cache, 0, q.data(), 2, 3, 1, out.data()), Error);
}

TEST(KvCache, StoresEntriesRoundedToItsDtype) {
  KvCache cache(1, 1, 2, 3, DType::BF16);
  const float k[2] = {1.0f + 1.0f / 512, 3.14159f}, v[2] = {-2.5f, 1e-3f};
  cache.store(0, 2, k, v);
  const auto* keys = reinterpret_cast<const uint16_t*>(cache.keys(0, 0));
  const auto* vals = reinterpret_cast<const uint16_t*>(cache.values(0, 0));
  EXPECT_EQ(keys[4], f32_to_bf16(k[0]));
  EXPECT_EQ(keys[5], f32_to_bf16(k[1]));
  EXPECT_EQ(vals[4], f32_to_bf16(v[0]));
  EXPECT_EQ(bf16_to_f32(keys[4]), 1.0f);  // 1 + 2^-9 rounds to 1 in bf16
  EXPECT_EQ(cache.bytes(), 1u * 2 * 1 * 3 * 2 * 2);
}

TEST(KvCache, RejectsBadShapesDtypesAndPositions) {
  EXPECT_THROW(KvCache(1, 1, 2, 0, DType::F32), Error);
  EXPECT_THROW(KvCache(1, 1, 2, 4, DType::I32), Error);
  KvCache cache(2, 1, 2, 4, DType::F32);
  const float kv[2] = {0, 0};
  EXPECT_THROW(cache.store(0, 4, kv, kv), Error);
  EXPECT_THROW(cache.store(2, 0, kv, kv), Error);
  EXPECT_THROW(cache.set_length(5), Error);
}

// A strided slot (a compressed history, DeepSeek-V4's entries): one row per `stride` positions,
// ceil(capacity / stride) of them; a position adds row / stride bytes; the rows count as used
// once complete; a prefix block carries the rows its positions complete, padded to
// ceil(n / stride); a stride with a window is refused.
TEST(KvCache, StridedSlotHoldsOneRowPerStridePositions) {
  const KvSlotShape full{.kv_heads = 1, .head_dim = 2, .window = 0, .key_only = true};
  const KvSlotShape strided{.kv_heads = 1, .head_dim = 2, .window = 0, .key_only = true, .stride = 4};
  KvCache cache({full, strided}, 10, 4, DType::F32);
  EXPECT_EQ(cache.rows(1), 3);  // ceil(10 / 4)
  EXPECT_EQ(cache.bytes(), (10u + 3u) * 2 * sizeof(float));
  EXPECT_EQ(cache.bytes_per_position(), 2 * sizeof(float) + 2);  // 8 bytes per 4 positions
  EXPECT_EQ(cache.row_of(1, 7), 1);
  const float e0[2] = {1, 2}, e1[2] = {3, 4}, x[2] = {9, 9};
  for (int64_t p = 0; p < 9; ++p) cache.store(0, p, x, nullptr);
  cache.store(1, 0, e0, nullptr);  // positions 0-3's entry
  cache.store(1, 4, e1, nullptr);  // positions 4-7's
  cache.set_length(9);
  EXPECT_EQ(cache.used_bytes(), (9u + 2u) * 2 * sizeof(float));  // entry 2 (positions 8-11) not yet complete
  // Blocks of 6 positions: [0, 6) completes entry 0, [6, 12) entry 1; each padded to 2 rows.
  EXPECT_EQ(cache.block_bytes(6), (6u + 2u) * 2 * sizeof(float));
  std::vector<uint8_t> b0(cache.block_bytes(6)), b1(cache.block_bytes(3));
  cache.save_rows(0, 6, b0.data());
  cache.save_rows(6, 3, b1.data());  // [6, 9): entry 1
  KvCache other({full, strided}, 10, 4, DType::F32);
  other.load_rows(0, 6, b0.data(), 9);
  other.load_rows(6, 3, b1.data(), 9);
  other.set_length(9);
  std::vector<float> got(4);
  other.read_f32(1, 0, 0, 0, 2, got.data());
  EXPECT_EQ(got, (std::vector<float>{1, 2, 3, 4}));
  EXPECT_THROW(KvCache({KvSlotShape{.kv_heads = 1, .head_dim = 2, .window = 4, .key_only = true, .stride = 4}}, 10, 4,
                       DType::F32),
               Error);
  EXPECT_THROW(cache.slot_block_bytes(1, 4), Error);
}

}  // namespace
}  // namespace fp4lm::model::attention_test
