// Every registered FP8 W8A16 CPU backend (cpu_fp8_w8a16_avx2, cpu_fp8_w8a16_avx512) against fp64 evaluations
// of the same operands and against the `reference` backend: every E4M3 code (subnormals too),
// per-tensor and per-channel weight_scale, fused shards, odd shapes, all activation dtypes, with
// and without bias; thread-count and batch invariance; the grouped MoE; load errors; the oracle.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "common/error_of.h"
#include "core/error.h"
#include "kernels/registry.h"
#include "kernel_test_support.h"

namespace fp4lm::kernels::fp8_cpu_kernels_test {
namespace {

using testing::Expected;

struct Fp8Layer {
  std::vector<std::vector<uint8_t>> codes;  // per shard [rows, k]
  LinearWeights weights;
};

struct Fp8Spec {
  int64_t n = 0, k = 0;
  std::vector<int64_t> shard_rows;
  bool bias = false;
  bool per_channel = false;  // per-row weight_scale instead of one per shard
  QuantKey key = kFp8W8A16;
  uint32_t seed = 1;
};

// Random weights quantized to E4M3 by amax/448 per tensor or per row; row 0 of each shard also
// cycles through every non-NaN code, so all 254 values (±0, subnormals, ±448) are decoded.
std::shared_ptr<Fp8Layer> make_fp8_layer(const Fp8Spec& s) {
  auto layer = std::make_shared<Fp8Layer>();
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  LinearWeights& w = layer->weights;
  w.key = s.key;
  w.n = s.n;
  w.k = s.k;
  for (size_t i = 0; i < s.shard_rows.size(); ++i) {
    const int64_t rows = s.shard_rows[i];
    std::vector<float> data(static_cast<size_t>(rows * s.k));
    for (int64_t r = 0; r < rows; ++r) {
      const float mag = 0.02f * std::exp2(uni(rng) + static_cast<float>(i));
      for (int64_t j = 0; j < s.k; ++j) data[r * s.k + j] = normal(rng) * mag;
    }
    WeightShard sh;
    sh.name = "test.fp8.shard" + std::to_string(i);
    sh.rows = rows;
    Fp8View v;
    std::vector<uint8_t> codes(static_cast<size_t>(rows * s.k));
    auto amax_of = [&](int64_t r0, int64_t r1) {
      float a = 0;
      for (int64_t q = r0 * s.k; q < r1 * s.k; ++q) a = std::max(a, std::fabs(data[q]));
      return a > 0 ? a / 448.0f : 1.0f;
    };
    if (s.per_channel)
      for (int64_t r = 0; r < rows; ++r) v.row_scales.push_back(amax_of(r, r + 1));
    else
      v.global_scale = amax_of(0, rows);
    for (int64_t r = 0; r < rows; ++r) {
      const float sc = s.per_channel ? v.row_scales[r] : v.global_scale;
      for (int64_t j = 0; j < s.k; ++j) codes[r * s.k + j] = f32_to_e4m3(data[r * s.k + j] / sc);
    }
    int code = 0;
    for (int64_t j = 0; j < s.k; ++j) {
      if ((code & 0x7f) == 0x7f) ++code;
      codes[j] = static_cast<uint8_t>(code);
      code = (code + 1) & 0xff;
    }
    layer->codes.push_back(std::move(codes));
    v.input_scale = 0.02f;
    sh.view = v;
    w.shards.push_back(sh);
  }
  for (size_t i = 0; i < w.shards.size(); ++i) w.shards[i].as<Fp8View>().codes = layer->codes[i].data();
  if (s.bias)
    for (int64_t r = 0; r < s.n; ++r) w.bias.push_back(normal(rng));
  w.input_scale = 0.02f;
  return layer;
}

LinearWeights weights_of(const std::shared_ptr<Fp8Layer>& l) {
  LinearWeights w = l->weights;
  w.keepalive = l;
  return w;
}

// x (act-dtype-rounded) times the exactly decoded weights × scale, in fp64.
Expected expected_f64(const LinearWeights& w, const std::vector<float>& x, int64_t m) {
  std::vector<std::vector<double>> rows;  // code × scale, exact in fp64
  for (const WeightShard& s : w.shards) {
    const Fp8View& v = s.as<Fp8View>();
    for (int64_t rr = 0; rr < s.rows; ++rr) {
      const double sc = v.row_scales.empty() ? v.global_scale : v.row_scales[rr];
      std::vector<double>& row = rows.emplace_back(static_cast<size_t>(w.k));
      for (int64_t j = 0; j < w.k; ++j) row[j] = static_cast<double>(e4m3_to_f32(v.codes[rr * w.k + j])) * sc;
    }
  }
  return testing::linear_f64(w, std::vector<double>(x.begin(), x.end()), m, [&](int64_t r) { return rows[r]; });
}

void expect_close(const std::vector<float>& y, const Expected& e, DType act, const std::string& what) {
  testing::expect_within_f64_bound(y, e, act, what, 1e-5);
}

// The registered backends this CPU can run (every ISA's, from the registry), plus reference.
std::vector<std::string> fp8_backends() {
  return testing::runnable_backends_with_scheme(LayerKind::linear, kFp8W8A16);
}

struct Case {
  int64_t n, k, m;
  DType act;
  bool bias, per_channel;
  std::vector<int64_t> shards;
};

const std::vector<Case> kCases = {
    {1, 1, 1, DType::F32, false, false, {1}},          {7, 15, 2, DType::BF16, true, true, {3, 4}},
    {64, 16, 3, DType::F16, false, false, {16, 16, 32}}, {300, 4096, 1, DType::BF16, true, true, {100, 150, 50}},
    {7, 33, 33, DType::F16, true, false, {2, 5}},      {64, 272, 5, DType::F32, false, true, {32, 32}},
    {300, 272, 9, DType::BF16, true, false, {128, 128, 44}}, {1, 4096, 2, DType::F16, true, true, {1}},
    {65, 100, 4, DType::F32, true, false, {65}},       {24, 4096, 1, DType::F32, false, false, {24}},
};

TEST(Fp8CpuKernels, EveryBackendMatchesFp64OfDecodedWeights) {
  ThreadPool pool(2);
  uint32_t seed = 100;
  for (const std::string& backend : fp8_backends())
    for (QuantKey key : {kFp8W8A16, kFp8}) {
      if (backend == "reference" && key == kFp8) continue;  // reference emulates W8A8 (quantized x)
      for (const Case& c : kCases) {
        SCOPED_TRACE(backend + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " m=" +
                     std::to_string(c.m) + " act=" + std::string(dtype_name(c.act)) + (c.per_channel ? " per-channel" : ""));
        auto layer = make_fp8_layer({c.n, c.k, c.shards, c.bias, c.per_channel, key, seed++});
        const LinearWeights w = weights_of(layer);
        const std::vector<float> x = testing::make_activations(c.m, c.k, seed++);
        const std::vector<uint8_t> xa = testing::to_act(x, c.act);
        const std::vector<float> xr = testing::from_act(xa.data(), c.act, x.size());
        auto kern = testing::make(backend, w, c.act);
        expect_close(testing::run(*kern, xa, c.m, c.n, c.act, pool), expected_f64(w, xr, c.m), c.act, backend);
      }
    }
}

TEST(Fp8CpuKernels, ResultsIdenticalForAnyThreadCountAndBatch) {
  ThreadPool one(1), three(3);
  for (const std::string& backend : fp8_backends()) {
    if (backend == "reference") continue;
    SCOPED_TRACE(backend);
    auto layer = make_fp8_layer({300, 272, {100, 200}, true, true, kFp8W8A16, 7});
    const LinearWeights w = weights_of(layer);
    const int64_t m = 11;
    const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, 272, 8), DType::BF16);
    auto kern = testing::make(backend, w, DType::BF16);
    const std::vector<float> y1 = testing::run(*kern, xa, m, 300, DType::BF16, one);
    const std::vector<float> y3 = testing::run(*kern, xa, m, 300, DType::BF16, three);
    ASSERT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)));
    for (int64_t t = 0; t < m; ++t) {  // each token alone equals its row of the batch
      std::vector<uint8_t> xt(xa.begin() + t * 272 * 2, xa.begin() + (t + 1) * 272 * 2);
      const std::vector<float> yt = testing::run(*kern, xt, 1, 300, DType::BF16, three);
      ASSERT_EQ(0, std::memcmp(yt.data(), y1.data() + t * 300, 300 * sizeof(float))) << "token " << t;
    }
  }
}

// Calls of many tokens run the panel schedule (rows decoded once to fp32, register tiles over
// all tokens), a token alone the register schedule: every token of a large call must equal
// itself computed alone, bit for bit, for odd k (the zero-padded last chunk), several panel
// groups with a partial last one, token counts that leave partial tiles, every activation dtype
// and any thread count; and the batch must match fp64.
TEST(Fp8CpuKernels, PanelScheduleIsBitIdenticalToTheRegisterScheduleAndBatchInvariant) {
  struct Shape {
    int64_t n, k, m;
    DType act;
    std::vector<int64_t> shards;
  };
  const std::vector<Shape> shapes = {{300, 4096, 40, DType::BF16, {100, 150, 50}}, {97, 33, 17, DType::F16, {40, 57}},
                                     {50, 16, 23, DType::F32, {50}},                 {13, 100, 64, DType::BF16, {13}},
                                     {130, 272, 31, DType::F16, {64, 66}}};
  ThreadPool one(1), two(2), three(3);
  uint32_t seed = 500;
  for (const std::string& backend : fp8_backends()) {
    if (backend == "reference") continue;
    for (const Shape& c : shapes) {
      SCOPED_TRACE(backend + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " m=" + std::to_string(c.m) +
                   " act=" + std::string(dtype_name(c.act)));
      auto layer = make_fp8_layer({c.n, c.k, c.shards, true, c.n % 2 == 1, kFp8W8A16, seed++});
      const LinearWeights w = weights_of(layer);
      const std::vector<float> x = testing::make_activations(c.m, c.k, seed++);
      const std::vector<uint8_t> xa = testing::to_act(x, c.act);
      auto kern = testing::make(backend, w, c.act);
      const std::vector<float> y1 = testing::run(*kern, xa, c.m, c.n, c.act, one);
      expect_close(y1, expected_f64(w, testing::from_act(xa.data(), c.act, x.size()), c.m), c.act, backend);
      for (ThreadPool* pool : {&two, &three}) {
        const std::vector<float> yp = testing::run(*kern, xa, c.m, c.n, c.act, *pool);
        ASSERT_EQ(0, std::memcmp(y1.data(), yp.data(), y1.size() * sizeof(float)));
      }
      const size_t row_bytes = static_cast<size_t>(c.k) * dtype_size(c.act);
      for (int64_t t = 0; t < c.m; ++t) {
        std::vector<uint8_t> xt(xa.begin() + t * row_bytes, xa.begin() + (t + 1) * row_bytes);
        const std::vector<float> yt = testing::run(*kern, xt, 1, c.n, c.act, two);
        ASSERT_EQ(0, std::memcmp(yt.data(), y1.data() + t * c.n, c.n * sizeof(float))) << "token " << t;
      }
    }
  }
}

TEST(Fp8CpuKernels, BadWeightsAreLoadErrors) {
  for (const std::string& backend : fp8_backends()) {
    if (backend == "reference") continue;
    auto layer = make_fp8_layer({8, 32, {8}, false, false, kFp8W8A16, 3});
    layer->codes[0][5 * 32 + 7] = 0xFF;
    std::string e = test::error_of([&] { testing::make(backend, weights_of(layer), DType::BF16); });
    EXPECT_NE(e.find("test.fp8.shard0: weight element [5, 7] is the E4M3 NaN byte 0xFF"), std::string::npos) << e;
    layer = make_fp8_layer({8, 32, {8}, false, true, kFp8W8A16, 3});
    layer->weights.shards[0].as<Fp8View>().row_scales[3] = -1.0f;
    e = test::error_of([&] { testing::make(backend, weights_of(layer), DType::BF16); });
    EXPECT_NE(e.find("weight_scale of row 3 is -1"), std::string::npos) << e;
    layer->weights.shards[0].as<Fp8View>().row_scales.pop_back();
    e = test::error_of([&] { testing::make(backend, weights_of(layer), DType::BF16); });
    EXPECT_NE(e.find("per-channel weight_scale has 7 entries, expected 8"), std::string::npos) << e;
  }
}

TEST(Fp8CpuKernels, OracleSelectsAW8A16BackendForBothFp8KeysAndReferenceStillEmulatesW8A8) {
  for (QuantKey key : {kFp8, kFp8W8A16}) {
    LinearProblem p{key, DType::BF16, 64, 64, {}};
    Selection s = select_linear(p, "x");
    const std::string want = fp8_backends().front();  // the first available in table order
    EXPECT_EQ(s.backend->name, want);
    EXPECT_EQ(selection_message(s, LayerKind::linear, key).rfind("Using '" + want + "' FP8 Linear backend", 0), 0u);
    MoeProblem mp{key, DType::BF16, 4, 2, 64, 32, {}};
    EXPECT_EQ(select_moe(mp, "x").backend->name, want);
  }
  // Forced, reference runs W8A8 as the emulation (x quantized to E4M3 with input_scale).
  auto layer = make_fp8_layer({4, 16, {4}, false, false, kFp8, 5});
  const LinearWeights w = weights_of(layer);
  std::vector<float> x(16, 0.0f);
  x[0] = 0.0213f;  // not an E4M3 multiple of input_scale 0.02: W8A8 rounds it, W8A16 does not
  ThreadPool pool(1);
  const std::vector<uint8_t> xa = testing::to_act(x, DType::F32);
  const std::vector<float> y = testing::run(*testing::make("reference", w, DType::F32), xa, 1, 4, DType::F32, pool);
  const float xq = e4m3_to_f32(f32_to_e4m3(x[0] / 0.02f)) * 0.02f;
  EXPECT_NE(xq, x[0]);
  EXPECT_FLOAT_EQ(y[0], xq * e4m3_to_f32(layer->codes[0][0]) * w.shards[0].as<Fp8View>().global_scale);
}

// m = 6: every expert runs the register schedule; m = 96: about 38 tokens per expert, the panel.
void check_grouped_moe(int64_t m) {
  const int64_t experts = 5, hidden = 48, inter = 40, top_k = 2;
  MoeWeights mw;
  mw.key = kFp8W8A16;
  mw.num_experts = experts;
  mw.hidden = hidden;
  mw.inter = inter;
  std::vector<std::shared_ptr<Fp8Layer>> keep;
  uint32_t seed = 40;
  for (int64_t e = 0; e < experts; ++e) {
    auto w13 = make_fp8_layer({2 * inter, hidden, {inter, inter}, false, e % 2 == 1, kFp8W8A16, seed++});
    auto w2 = make_fp8_layer({hidden, inter, {hidden}, false, false, kFp8W8A16, seed++});
    mw.w13.push_back(weights_of(w13));
    mw.w2.push_back(weights_of(w2));
    keep.push_back(w13);
    keep.push_back(w2);
  }
  const testing::Top2Routing routing = testing::top2_routing(m, experts);
  const std::vector<int32_t>& ids = routing.ids;
  const std::vector<float>& wts = routing.weights;
  const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, hidden, 9, 0.5f), DType::BF16);
  // Tokens [t0, t0 + count) of the call alone.
  auto run_moe = [&](const std::string& name, ThreadPool& pool, int64_t t0 = 0, int64_t count = -1) {
    if (count < 0) count = m;
    const Backend* b = find_backend(name, LayerKind::moe);
    MoeProblem p{kFp8W8A16, DType::BF16, experts, top_k, hidden, inter, {}};
    EXPECT_EQ(rejection_reason(*b, p), "");
    auto k = b->make_moe(mw, p);
    std::vector<uint16_t> y(static_cast<size_t>(count * hidden));
    k->forward(xa.data() + t0 * hidden * 2, count, ids.data() + t0 * top_k, wts.data() + t0 * top_k, top_k, y.data(),
               pool);
    return testing::from_act(y.data(), DType::BF16, y.size());
  };
  ThreadPool one(1), three(3);
  const std::vector<float> ref = run_moe("reference", one);
  for (const std::string& backend : fp8_backends()) {
    if (backend == "reference") continue;
    SCOPED_TRACE(backend);
    const std::vector<float> y1 = run_moe(backend, one), y3 = run_moe(backend, three);
    ASSERT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)));
    double err = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) err += (y1[i] - ref[i]) * (y1[i] - ref[i]), norm += ref[i] * ref[i];
    // Both round h13, the SiLU·up intermediate and the output to bf16; they differ only in
    // fp32 summation order, which can flip a bf16 rounding: a few 2^-8 relative at most.
    EXPECT_LT(std::sqrt(err / norm), 4e-3);
    EXPECT_GT(norm, 0.0);
    for (int64_t t = 0; t < m; t += 5) {  // a token alone equals its row of the batch
      const std::vector<float> yt = run_moe(backend, three, t, 1);
      ASSERT_EQ(0, std::memcmp(yt.data(), y1.data() + t * hidden, hidden * sizeof(float))) << "token " << t;
    }
  }
}

TEST(Fp8CpuKernels, GroupedMoeMatchesReferenceMoeAndIsThreadAndBatchInvariant) {
  for (int64_t m : {6, 96}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    check_grouped_moe(m);
  }
}

}  // namespace
}  // namespace fp4lm::kernels::fp8_cpu_kernels_test
