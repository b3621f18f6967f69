// Every registered int8 W8A16 CPU backend (cpu_int8_w8a16_avx2) against fp64 evaluations of the
// same operands and against the `reference` backend: every int8 code (-128..127), per-row scales,
// fused shards, k with and without a tail of the 16-element chunk, M = 1 and M > 1 (register and
// panel schedules), all activation dtypes, with and without bias; thread-count and batch
// invariance; the grouped MoE; the W8A8 key's activation quantization on `reference`; load errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/error_of.h"
#include "core/error.h"
#include "kernels/registry.h"
#include "kernel_test_support.h"

namespace fp4lm::kernels::int8_cpu_kernels_test {
namespace {

using testing::Expected;

struct Int8Layer {
  std::vector<std::vector<int8_t>> codes;  // per shard [rows, k]
  LinearWeights weights;
};

struct Int8Spec {
  int64_t n = 0, k = 0;
  std::vector<int64_t> shard_rows;
  bool bias = false;
  QuantKey key = kInt8W8A16;
  uint32_t seed = 1;
};

// Random weights quantized as ModelOpt does (row amax / 127, round half even, clamp [-128, 127]);
// row 0 of each shard also cycles through every code, -128 included.
std::shared_ptr<Int8Layer> make_int8_layer(const Int8Spec& s) {
  auto layer = std::make_shared<Int8Layer>();
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  LinearWeights& w = layer->weights;
  w.key = s.key;
  w.n = s.n;
  w.k = s.k;
  for (size_t i = 0; i < s.shard_rows.size(); ++i) {
    const int64_t rows = s.shard_rows[i];
    WeightShard sh;
    sh.name = "test.int8.shard" + std::to_string(i);
    sh.rows = rows;
    Int8View v;
    std::vector<int8_t> codes(static_cast<size_t>(rows * s.k));
    for (int64_t r = 0; r < rows; ++r) {
      const float mag = 0.02f * std::exp2(uni(rng) + static_cast<float>(i));
      std::vector<float> row(static_cast<size_t>(s.k));
      float amax = 0;
      for (float& x : row) amax = std::max(amax, std::fabs(x = normal(rng) * mag));
      const float scale = amax > 0 ? amax / 127.0f : 1.0f;
      v.row_scales.push_back(scale);
      for (int64_t j = 0; j < s.k; ++j)
        codes[r * s.k + j] = static_cast<int8_t>(std::clamp(std::nearbyint(row[j] / scale), -128.0f, 127.0f));
    }
    for (int64_t j = 0; j < s.k; ++j) codes[j] = static_cast<int8_t>(static_cast<int>((j % 256)) - 128);
    layer->codes.push_back(std::move(codes));
    v.input_scale = 0.02f;
    sh.view = v;
    w.shards.push_back(sh);
  }
  for (size_t i = 0; i < w.shards.size(); ++i) w.shards[i].as<Int8View>().codes = layer->codes[i].data();
  if (s.bias)
    for (int64_t r = 0; r < s.n; ++r) w.bias.push_back(normal(rng));
  w.input_scale = 0.02f;
  return layer;
}

LinearWeights weights_of(const std::shared_ptr<Int8Layer>& l) {
  LinearWeights w = l->weights;
  w.keepalive = l;
  return w;
}

// x times code × row scale, in fp64 (exact products).
Expected expected_f64(const LinearWeights& w, const std::vector<double>& x, int64_t m) {
  std::vector<std::vector<double>> rows;
  for (const WeightShard& s : w.shards) {
    const Int8View& v = s.as<Int8View>();
    for (int64_t rr = 0; rr < s.rows; ++rr) {
      std::vector<double>& row = rows.emplace_back(static_cast<size_t>(w.k));
      for (int64_t j = 0; j < w.k; ++j) row[j] = static_cast<double>(v.codes[rr * w.k + j]) * v.row_scales[rr];
    }
  }
  return testing::linear_f64(w, x, m, [&](int64_t r) { return rows[r]; });
}

std::vector<double> as_f64(const std::vector<float>& x) { return {x.begin(), x.end()}; }

std::vector<std::string> int8_backends() { return testing::runnable_backends_with_scheme(LayerKind::linear, kInt8W8A16); }

struct Case {
  int64_t n, k, m;
  DType act;
  bool bias;
  std::vector<int64_t> shards;
};

// k: 1, 15, 33, 100, 136 (tails of the 16-element chunk), 16, 272, 4096 (none); m: 1 (GEMV), 2-5
// (register tiles), 9 and 33 (the panel schedule from 8 tokens).
const std::vector<Case> kCases = {
    {1, 1, 1, DType::F32, false, {1}},           {7, 15, 2, DType::BF16, true, {3, 4}},
    {64, 16, 3, DType::F16, false, {16, 16, 32}}, {300, 4096, 1, DType::BF16, true, {100, 150, 50}},
    {7, 33, 33, DType::F16, true, {2, 5}},       {64, 272, 5, DType::F32, false, {32, 32}},
    {300, 272, 9, DType::BF16, true, {128, 128, 44}}, {1, 4096, 2, DType::F16, true, {1}},
    {65, 100, 4, DType::F32, true, {65}},        {80, 136, 10, DType::F32, false, {80}},
};

TEST(Int8CpuKernels, EveryBackendMatchesFp64OfDecodedWeights) {
  ThreadPool pool(2);
  uint32_t seed = 100;
  const std::vector<std::string> backends = int8_backends();
  ASSERT_GE(backends.size(), 1u);
  for (const std::string& backend : backends)
    for (const Case& c : kCases) {
      SCOPED_TRACE(backend + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " m=" + std::to_string(c.m) +
                   " act=" + std::string(dtype_name(c.act)));
      auto layer = make_int8_layer({c.n, c.k, c.shards, c.bias, kInt8W8A16, seed++});
      const LinearWeights w = weights_of(layer);
      const std::vector<float> x = testing::make_activations(c.m, c.k, seed++);
      const std::vector<uint8_t> xa = testing::to_act(x, c.act);
      const std::vector<float> xr = testing::from_act(xa.data(), c.act, x.size());
      auto kern = testing::make(backend, w, c.act);
      const std::vector<float> y = testing::run(*kern, xa, c.m, c.n, c.act, pool);
      testing::expect_within_f64_bound(y, expected_f64(w, as_f64(xr), c.m), c.act, backend, 1e-5);
      if (backend != "reference") {  // and the reference backend's own result, within the same bound
        const std::vector<float> yr = testing::run(*testing::make("reference", w, c.act), xa, c.m, c.n, c.act, pool);
        Expected e = expected_f64(w, as_f64(xr), c.m);
        for (size_t i = 0; i < yr.size(); ++i) e.y[i] = yr[i];
        testing::expect_within_f64_bound(y, e, c.act, backend + " vs reference", 2e-5);
      }
    }
}

// Register schedule (few tokens) and panel schedule (8 or more) feed each (row, token) the same
// FMAs: a token alone equals its row of any batch, for any thread count.
TEST(Int8CpuKernels, ResultsIdenticalForAnyThreadCountAndBatch) {
  struct Shape {
    int64_t n, k, m;
    DType act;
    std::vector<int64_t> shards;
  };
  const std::vector<Shape> shapes = {{300, 272, 11, DType::BF16, {100, 200}}, {97, 33, 17, DType::F16, {40, 57}},
                                     {50, 16, 23, DType::F32, {50}},          {130, 136, 40, DType::F16, {64, 66}}};
  ThreadPool one(1), three(3);
  uint32_t seed = 500;
  for (const std::string& backend : int8_backends()) {
    if (backend == "reference") continue;
    for (const Shape& c : shapes) {
      SCOPED_TRACE(backend + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " m=" + std::to_string(c.m));
      auto layer = make_int8_layer({c.n, c.k, c.shards, true, kInt8W8A16, seed++});
      const LinearWeights w = weights_of(layer);
      const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(c.m, c.k, seed++), c.act);
      auto kern = testing::make(backend, w, c.act);
      const std::vector<float> y1 = testing::run(*kern, xa, c.m, c.n, c.act, one);
      const std::vector<float> y3 = testing::run(*kern, xa, c.m, c.n, c.act, three);
      ASSERT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)));
      const size_t row_bytes = static_cast<size_t>(c.k) * dtype_size(c.act);
      for (int64_t t = 0; t < c.m; ++t) {
        std::vector<uint8_t> xt(xa.begin() + t * row_bytes, xa.begin() + (t + 1) * row_bytes);
        const std::vector<float> yt = testing::run(*kern, xt, 1, c.n, c.act, three);
        ASSERT_EQ(0, std::memcmp(yt.data(), y1.data() + t * c.n, c.n * sizeof(float))) << "token " << t;
      }
    }
  }
}

// W8A8 (kInt8W8A8) on `reference`: x quantized to int8 with the static input_scale (round half
// even, clamp [-128, 127]) before the product, checked against fp64 of those quantized values
// computed here; the W8A16 backends match on the weight key and serve the key too.
TEST(Int8CpuKernels, W8A8ReferenceQuantizesTheActivationsPerTensor) {
  ThreadPool pool(1);
  auto layer = make_int8_layer({6, 40, {6}, true, kInt8W8A8, 9});
  LinearWeights w = weights_of(layer);
  const float s = 0.015625f;  // a power of two: x / s is exact, so the ties below are ties
  w.input_scale = s;
  const int64_t m = 3;
  std::vector<float> x = testing::make_activations(m, 40, 10);
  x[0] = 2.0f;        // clamps to 127
  x[1] = -3.0f;       // clamps to -128 (not -127: narrow_range is False)
  x[2] = 2.5f * s;    // a tie: to even (2)
  x[3] = 3.5f * s;    // a tie: to even (4)
  x[4] = -0.5f * s;   // a tie: to -0 (even)
  std::vector<double> xq(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    xq[i] = std::clamp(std::nearbyint(static_cast<double>(x[i] / s)), -128.0, 127.0) * s;
  EXPECT_EQ(xq[0], 127.0 * s);
  EXPECT_EQ(xq[1], -128.0 * s);
  EXPECT_EQ(std::lround(xq[2] / s), 2);
  EXPECT_EQ(std::lround(xq[3] / s), 4);
  EXPECT_EQ(xq[4], 0.0);
  const std::vector<uint8_t> xa = testing::to_act(x, DType::F32);
  const std::vector<float> y = testing::run(*testing::make("reference", w, DType::F32), xa, m, 6, DType::F32, pool);
  testing::expect_within_f64_bound(y, expected_f64(w, xq, m), DType::F32, "reference W8A8", 1e-6);
  // Unquantized x gives something else (the test can fail).
  const Expected plain = expected_f64(w, as_f64(x), m);
  double diff = 0;
  for (size_t i = 0; i < y.size(); ++i) diff = std::max(diff, std::fabs(y[i] - plain.y[i]));
  EXPECT_GT(diff, 1e-3);
  for (const std::string& backend : int8_backends())
    EXPECT_EQ(rejection_reason(*find_backend(backend, LayerKind::linear), LinearProblem{kInt8W8A8, DType::BF16, 6, 40, {}}),
              "")
        << backend;
}

TEST(Int8CpuKernels, OracleSelectsTheFastBackendForBothInt8Keys) {
  for (QuantKey key : {kInt8W8A16, kInt8W8A8}) {
    LinearProblem p{key, DType::BF16, 64, 64, {}};
    Selection s = select_linear(p, "x");
    const std::string want = int8_backends().front();
    EXPECT_EQ(s.backend->name, want);
    EXPECT_EQ(selection_message(s, LayerKind::linear, key).rfind("Using '" + want + "' int8 Linear backend", 0), 0u);
    MoeProblem mp{key, DType::BF16, 4, 2, 64, 32, {}};
    EXPECT_EQ(select_moe(mp, "x").backend->name, want);
  }
  EXPECT_EQ(scheme_name(kInt8W8A16), "int8_w8a16");
  EXPECT_EQ(scheme_name(kInt8W8A8), "int8_w8a8");
}

TEST(Int8CpuKernels, BadWeightsAreLoadErrors) {
  for (const std::string& backend : int8_backends()) {
    SCOPED_TRACE(backend);
    auto layer = make_int8_layer({8, 32, {8}, false, kInt8W8A16, 3});
    layer->weights.shards[0].as<Int8View>().row_scales[3] = std::nanf("");
    std::string e = test::error_of([&] { testing::make(backend, weights_of(layer), DType::BF16); });
    EXPECT_NE(e.find("test.int8.shard0: int8 weight_scale of row 3 is nan"), std::string::npos) << e;
    layer->weights.shards[0].as<Int8View>().row_scales[3] = INFINITY;
    e = test::error_of([&] { testing::make(backend, weights_of(layer), DType::BF16); });
    EXPECT_NE(e.find("row 3 is inf"), std::string::npos) << e;
    layer->weights.shards[0].as<Int8View>().row_scales.pop_back();
    e = test::error_of([&] { testing::make(backend, weights_of(layer), DType::BF16); });
    EXPECT_NE(e.find("int8 weight_scale has 7 entries, expected one per row (8)"), std::string::npos) << e;
  }
}

// m = 6: every expert runs the register schedule; m = 96: about 38 tokens per expert, the panel.
void check_grouped_moe(int64_t m) {
  const int64_t experts = 5, hidden = 48, inter = 40, top_k = 2;
  MoeWeights mw;
  mw.key = kInt8W8A16;
  mw.num_experts = experts;
  mw.hidden = hidden;
  mw.inter = inter;
  std::vector<std::shared_ptr<Int8Layer>> keep;
  uint32_t seed = 40;
  for (int64_t e = 0; e < experts; ++e) {
    auto w13 = make_int8_layer({2 * inter, hidden, {inter, inter}, false, kInt8W8A16, seed++});
    auto w2 = make_int8_layer({hidden, inter, {hidden}, false, kInt8W8A16, seed++});
    mw.w13.push_back(weights_of(w13));
    mw.w2.push_back(weights_of(w2));
    keep.push_back(w13);
    keep.push_back(w2);
  }
  const testing::Top2Routing routing = testing::top2_routing(m, experts);
  const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, hidden, 9, 0.5f), DType::BF16);
  auto run_moe = [&](const std::string& name, ThreadPool& pool, int64_t t0 = 0, int64_t count = -1) {
    if (count < 0) count = m;
    const Backend* b = find_backend(name, LayerKind::moe);
    MoeProblem p{kInt8W8A16, DType::BF16, experts, top_k, hidden, inter, {}};
    EXPECT_EQ(rejection_reason(*b, p), "");
    auto k = b->make_moe(mw, p);
    std::vector<uint16_t> y(static_cast<size_t>(count * hidden));
    k->forward(xa.data() + t0 * hidden * 2, count, routing.ids.data() + t0 * top_k, routing.weights.data() + t0 * top_k,
               top_k, y.data(), pool);
    return testing::from_act(y.data(), DType::BF16, y.size());
  };
  ThreadPool one(1), three(3);
  const std::vector<float> ref = run_moe("reference", one);
  for (const std::string& backend : testing::runnable_backends_with_scheme(LayerKind::moe, kInt8W8A16)) {
    if (backend == "reference") continue;
    SCOPED_TRACE(backend);
    const std::vector<float> y1 = run_moe(backend, one), y3 = run_moe(backend, three);
    ASSERT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)));
    double err = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) err += (y1[i] - ref[i]) * (y1[i] - ref[i]), norm += ref[i] * ref[i];
    // Both round h13, the SiLU·up intermediate and the output to bf16; they differ only in fp32
    // summation order, which can flip a bf16 rounding: a few 2^-8 relative at most.
    EXPECT_LT(std::sqrt(err / norm), 4e-3);
    EXPECT_GT(norm, 0.0);
    for (int64_t t = 0; t < m; t += 5) {
      const std::vector<float> yt = run_moe(backend, three, t, 1);
      ASSERT_EQ(0, std::memcmp(yt.data(), y1.data() + t * hidden, hidden * sizeof(float))) << "token " << t;
    }
  }
}

TEST(Int8CpuKernels, GroupedMoeMatchesReferenceMoeAndIsThreadAndBatchInvariant) {
  for (int64_t m : {6, 96}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    check_grouped_moe(m);
  }
}

}  // namespace
}  // namespace fp4lm::kernels::int8_cpu_kernels_test
