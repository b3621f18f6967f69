// Dynamic W4A4 (`--activation-scale dynamic`, LinearWeights::per_token_input_scale) on every W4A4
// Linear backend (each ISA and `reference`): against fp64 of the per-token quantized operands,
// each token's result independent of its batch-mates (bit for bit), and the static path's
// arithmetic (the same output bits when every token's own scale equals the static one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "kernels/registry.h"
#include "quant/nvfp4.h"

namespace fp4lm::kernels::nvfp4_dynamic_scale_test {
namespace {

class W4a4DynamicBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { REQUIRE_BACKEND(GetParam(), LayerKind::linear); }
};

INSTANTIATE_TEST_SUITE_P(All, W4a4DynamicBackend,
                         ::testing::ValuesIn(testing::concat(testing::backends_with_scheme(LayerKind::linear,
                                                                                           kNvfp4W4A4),
                                                             std::vector<std::string>{"reference"})),
                         testing::BackendName());

LinearWeights dynamic_weights(const std::shared_ptr<testing::TestLayer>& layer) {
  LinearWeights w = testing::weights_of(layer);
  w.per_token_input_scale = true;
  w.input_scale = 0.0f;  // not used, and not required
  return w;
}

// Tokens of very different magnitudes (2^-12 .. 2^12) and an all-zero token.
std::vector<float> spread_tokens(int64_t m, int64_t k, uint32_t seed) {
  std::vector<float> x = testing::make_activations(m, k, seed);
  for (int64_t t = 0; t < m; ++t) {
    const float mag = std::exp2(static_cast<float>((t * 5) % 25 - 12));
    for (int64_t j = 0; j < k; ++j) x[t * k + j] = t == 2 ? 0.0f : x[t * k + j] * mag;
  }
  return x;
}

// |y - e| <= 1e-5 · Σ|terms| + half an output ulp (fp32 sums of exact block products).
void expect_close(const std::vector<float>& y, const testing::Expected& e, DType act, const std::string& what) {
  testing::expect_within_f64_bound(y, e, act, what, 1e-5);
}

TEST_P(W4a4DynamicBackend, MatchesFp64OfPerTokenQuantizedOperands) {
  const std::string backend = GetParam();
  ThreadPool pool(2);
  uint32_t seed = 500;
  struct Case {
    int64_t n, k, m;
    DType act;
    std::vector<int64_t> shards;
  };
  for (const Case& c : std::vector<Case>{{7, 48, 3, DType::F32, {3, 4}},
                                         {64, 272, 17, DType::BF16, {32, 32}},
                                         {40, 4096, 1, DType::F16, {40}},
                                         {24, 512, 33, DType::F32, {8, 16}}}) {
    SCOPED_TRACE(backend + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " m=" + std::to_string(c.m));
    auto layer = testing::make_layer({c.n, c.k, c.shards, true, kNvfp4W4A4, seed++});
    const LinearWeights w = dynamic_weights(layer);
    const std::vector<uint8_t> xa = testing::to_act(spread_tokens(c.m, c.k, seed++), c.act);
    const std::vector<float> xr = testing::from_act(xa.data(), c.act, static_cast<size_t>(c.m * c.k));
    const testing::Expected e = testing::expected_f64(w, xr, c.m, true);
    expect_close(testing::run(*testing::make(backend, w, c.act), xa, c.m, c.n, c.act, pool), e, c.act, backend);
  }
}

// A token's output is the same bits alone, in any batch, next to tokens 2^24 times larger or all
// zero, for M = 1 GEMV, register tiles and panels.
TEST_P(W4a4DynamicBackend, TokenResultsIndependentOfBatchMates) {
  const std::string backend = GetParam();
  ThreadPool pool(2);
  for (DType act : {DType::F32, DType::BF16}) {
    const int64_t n = 40, k = 272, m = 21;
    auto layer = testing::make_layer({n, k, {16, 24}, false, kNvfp4W4A4, 41});
    auto kern = testing::make(backend, dynamic_weights(layer), act);
    const size_t es = dtype_size(act);
    const std::vector<uint8_t> xa = testing::to_act(spread_tokens(m, k, 42), act);
    std::vector<uint8_t> all(m * n * es), one(n * es), three(3 * n * es);
    kern->forward(xa.data(), m, all.data(), pool);
    for (int64_t t = 0; t < m; ++t) {
      kern->forward(xa.data() + t * k * es, 1, one.data(), pool);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * n * es, n * es)) << backend << " token " << t;
    }
    kern->forward(xa.data() + 4 * k * es, 3, three.data(), pool);
    EXPECT_EQ(0, std::memcmp(three.data(), all.data() + 4 * n * es, 3 * n * es)) << backend << " tokens 4-6";
  }
}

// Static and dynamic run one arithmetic: tokens whose amax is the same A give, under the static
// scale s = A / 2688 (what the dynamic rule computes for each of them), the same output bits as
// under the dynamic scale; a static scale that differs gives other bits (the scale is used).
TEST_P(W4a4DynamicBackend, StaticScaleEqualsDynamicWhereEveryTokensOwnScaleIsIt) {
  const std::string backend = GetParam();
  ThreadPool pool(2);
  const int64_t n = 36, k = 272, m = 19;
  std::vector<float> x = testing::make_activations(m, k, 43);
  for (int64_t t = 0; t < m; ++t) {  // every token's amax is exactly 3
    float a = 0;
    for (int64_t j = 0; j < k; ++j) a = std::max(a, std::fabs(x[t * k + j]));
    for (int64_t j = 0; j < k; ++j) x[t * k + j] = std::clamp(x[t * k + j] * (2.5f / a), -2.5f, 2.5f);
    x[t * k + (t * 7) % k] = t % 2 ? 3.0f : -3.0f;
  }
  const std::vector<uint8_t> xa = testing::to_act(x, DType::F32);
  const float s = quant::dynamic_activation_scale(x.data(), k);
  for (int64_t t = 0; t < m; ++t) ASSERT_EQ(quant::dynamic_activation_scale(x.data() + t * k, k), s);
  auto layer = testing::make_layer({n, k, {12, 24}, true, kNvfp4W4A4, 44});
  LinearWeights stat = testing::weights_of(layer);
  stat.input_scale = s;
  const std::vector<float> y_static = testing::run(*testing::make(backend, stat, DType::F32), xa, m, n, DType::F32, pool);
  const std::vector<float> y_dynamic =
      testing::run(*testing::make(backend, dynamic_weights(layer), DType::F32), xa, m, n, DType::F32, pool);
  EXPECT_EQ(0, std::memcmp(y_static.data(), y_dynamic.data(), y_static.size() * sizeof(float))) << backend;
  stat.input_scale = s * 1.5f;
  EXPECT_NE(testing::run(*testing::make(backend, stat, DType::F32), xa, m, n, DType::F32, pool), y_dynamic);
}

}  // namespace
}  // namespace fp4lm::kernels::nvfp4_dynamic_scale_test
