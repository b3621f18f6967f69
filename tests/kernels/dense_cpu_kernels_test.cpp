// Every registered dense CPU backend (unquantized F32/BF16/F16 weights: lm_head, routers)
// against an fp64 evaluation and the `reference` backend on odd shapes, every weight and
// activation dtype, bias, fused shards of different dtypes; thread-count determinism, batch
// independence, the grouped dense MoE, load errors and oracle selection.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/registry.h"
#include "kernel_test_support.h"

namespace fp4lm::kernels::dense_cpu_kernels_test {
namespace {


struct DenseLayer {
  std::vector<std::vector<uint8_t>> data;  // per shard, in its dtype
  LinearWeights weights;
};

// Shards of `rows` each, in `dtypes` (cycled); values normal × per-row magnitude.
std::shared_ptr<DenseLayer> make_dense(int64_t n, int64_t k, const std::vector<int64_t>& rows,
                                       const std::vector<DType>& dtypes, bool bias, uint32_t seed) {
  auto l = std::make_shared<DenseLayer>();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  l->weights.key = kUnquantized;
  l->weights.n = n;
  l->weights.k = k;
  l->data.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const DType t = dtypes[i % dtypes.size()];
    std::vector<float> v(static_cast<size_t>(rows[i] * k));
    for (int64_t r = 0; r < rows[i]; ++r) {
      const float mag = 0.05f * std::exp2(uni(rng));
      for (int64_t j = 0; j < k; ++j) v[r * k + j] = normal(rng) * mag;
    }
    l->data.push_back(testing::to_act(v, t));
    WeightShard s;
    s.name = "test.dense.shard" + std::to_string(i);
    s.rows = rows[i];
    s.view = DenseView{t, l->data.back().data()};
    l->weights.shards.push_back(s);
  }
  if (bias)
    for (int64_t r = 0; r < n; ++r) l->weights.bias.push_back(normal(rng));
  return l;
}

LinearWeights weights_of(const std::shared_ptr<DenseLayer>& l) {
  LinearWeights w = l->weights;
  w.keepalive = l;
  return w;
}

testing::Expected expected_f64(const LinearWeights& w, const std::vector<float>& x, int64_t m) {
  std::vector<std::vector<double>> rows;  // W decoded once, row by row
  for (const WeightShard& s : w.shards) {
    const std::vector<float> f = testing::from_act(s.as<DenseView>().data, s.as<DenseView>().dtype, static_cast<size_t>(s.rows * w.k));
    for (int64_t i = 0; i < s.rows; ++i) rows.emplace_back(f.begin() + i * w.k, f.begin() + (i + 1) * w.k);
  }
  return testing::linear_f64(w, std::vector<double>(x.begin(), x.end()), m, [&](int64_t r) { return rows[r]; });
}

using testing::make;
using testing::run;

// Same bounds as the NVFP4 tests: |y - e| <= 1e-5 Σ|terms| + half an ulp of the output dtype;
// for f32 also ||y - e|| / ||e|| <= 1e-5.
void expect_close(const std::vector<float>& y, const testing::Expected& e, DType act, const std::string& what) {
  double err2 = 0, ref2 = 0;
  int reported = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double tol = 1e-5 * e.magnitude[i] + testing::output_rounding(act) * std::fabs(e.y[i]) +
                       (act == DType::F16 ? 0x1p-24 : 0.0) + 1e-30;
    const double d = std::fabs(static_cast<double>(y[i]) - e.y[i]);
    if (!(d <= tol) && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " = " << y[i] << ", expected " << e.y[i] << " (|diff| "
                    << d << " > tol " << tol << ")";
    err2 += d * d;
    ref2 += e.y[i] * e.y[i];
  }
  if (act == DType::F32 && ref2 > 0) {
    EXPECT_LE(std::sqrt(err2 / ref2), 1e-5) << what;
  }
}

struct Case {
  int64_t n, k, m;
  DType act;
  bool bias;
  std::vector<int64_t> shards;
  std::vector<DType> wdt;
};

// N ∈ {1, 7, 64, 300}, K ∈ {1, 5, 16, 48, 272, 4096} (k need not be a multiple of 8),
// M ∈ {1, 2, 3, 8, 33, 130}, every act and weight dtype, shards mixing dtypes.
const std::vector<Case> kCases = {
    {1, 16, 1, DType::F32, false, {1}, {DType::F32}},
    {7, 48, 2, DType::BF16, true, {3, 4}, {DType::BF16}},
    {64, 272, 3, DType::F16, false, {16, 16, 32}, {DType::F16, DType::BF16, DType::F32}},
    {300, 4096, 8, DType::F32, true, {100, 150, 50}, {DType::BF16}},
    {7, 5, 33, DType::F16, true, {2, 5}, {DType::F32, DType::F16}},
    {64, 4096, 1, DType::BF16, false, {64}, {DType::BF16}},
    {300, 272, 130, DType::BF16, true, {128, 128, 44}, {DType::F32, DType::BF16}},
    {1, 4096, 2, DType::F16, true, {1}, {DType::F16}},
    {64, 1, 130, DType::F32, true, {40, 24}, {DType::BF16, DType::F32}},
    {300, 13, 3, DType::BF16, false, {299, 1}, {DType::F16}},
    {7, 271, 8, DType::F32, false, {7}, {DType::F32}},
    {64, 4093, 33, DType::F16, true, {8, 8, 48}, {DType::BF16, DType::F16}},
    {1, 48, 130, DType::BF16, true, {1}, {DType::F32}},
    {300, 2048, 1, DType::F32, false, {256, 32, 12}, {DType::BF16, DType::F16, DType::F32}},
};

std::string describe(const Case& c) {
  std::string s = "n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " m=" + std::to_string(c.m) +
                  " act=" + std::string(dtype_name(c.act)) + (c.bias ? " bias" : "") + " w=";
  for (DType t : c.wdt) s += std::string(dtype_name(t)) + ",";
  return s;
}

// Every registered dense backend (every ISA), skipped with its own unavailable_reason.
class DenseBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { REQUIRE_BACKEND(GetParam(), LayerKind::linear); }
};
INSTANTIATE_TEST_SUITE_P(All, DenseBackend,
                         ::testing::ValuesIn(testing::backends_with_scheme(LayerKind::linear, kUnquantized)),
                         testing::BackendName());

TEST_P(DenseBackend, MatchesFp64AndReference) {
  const std::string backend = GetParam();
  ThreadPool pool(2);
  uint32_t seed = 500;
  for (const Case& c : kCases) {
    SCOPED_TRACE(describe(c));
    auto layer = make_dense(c.n, c.k, c.shards, c.wdt, c.bias, seed++);
    const LinearWeights w = weights_of(layer);
    const std::vector<float> x = testing::make_activations(c.m, c.k, seed++);
    const std::vector<uint8_t> xa = testing::to_act(x, c.act);
    const std::vector<float> xr = testing::from_act(xa.data(), c.act, x.size());
    const testing::Expected e = expected_f64(w, xr, c.m);
    const std::vector<float> y = run(*make(backend, w, c.act), xa, c.m, c.n, c.act, pool);
    expect_close(y, e, c.act, backend);
    // The oracle agrees with the same fp64 (so both are held to one standard).
    expect_close(run(*make("reference", w, c.act), xa, c.m, c.n, c.act, pool), e, c.act, "reference");
  }
}

TEST_P(DenseBackend, ResultsIdenticalForAnyThreadCountAndBatch) {
  for (DType wdt : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(std::string(dtype_name(wdt)));
    auto layer = make_dense(301, 270, {101, 200}, {wdt}, true, 31);
    auto kern = make(GetParam(), weights_of(layer), DType::F32);
    const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(13, 270, 32), DType::F32);
    std::vector<std::vector<float>> outs;
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      outs.push_back(run(*kern, xa, 13, 301, DType::F32, pool));
    }
    EXPECT_EQ(outs[0], outs[1]);
    EXPECT_EQ(outs[0], outs[2]);
    // Each token alone gives the bits it got in the batch (M=1 GEMV and M>1 tiles agree).
    ThreadPool pool(2);
    for (int t = 0; t < 13; ++t) {
      std::vector<uint8_t> one(xa.begin() + t * 270 * 4, xa.begin() + (t + 1) * 270 * 4);
      const std::vector<float> y1 = run(*kern, one, 1, 301, DType::F32, pool);
      EXPECT_EQ(0, std::memcmp(y1.data(), outs[0].data() + t * 301, 301 * sizeof(float))) << "token " << t;
    }
  }
}

TEST_P(DenseBackend, BadWeightsAreLoadErrors) {
  auto layer = make_dense(7, 48, {3, 4}, {DType::BF16}, false, 41);
  const Backend* b = find_backend(GetParam(), LayerKind::linear);
  const LinearProblem p{kUnquantized, DType::F32, 7, 48, {}};
  auto expect_error = [&](const LinearWeights& w, const std::string& needle) {
    try {
      b->make_linear(w, p);
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  LinearWeights bad = weights_of(layer);
  bad.shards[1].rows = 3;
  expect_error(bad, "shards hold 6 rows");
  bad = weights_of(layer);
  bad.shards[1].as<DenseView>().dtype = DType::F8_E4M3;
  expect_error(bad, "test.dense.shard1");
  bad = weights_of(layer);
  bad.shards[0].as<DenseView>().data = nullptr;
  expect_error(bad, "test.dense.shard0");
  bad = weights_of(layer);
  bad.bias.assign(5, 0.0f);
  expect_error(bad, "bias has 5 elements");
}

TEST(DenseCpuKernels, OracleSelectsTheBestAvailableForUnquantizedLayers) {
  REQUIRE_AVX2();
  const std::string best =
      testing::unavailable("cpu_dense_avx512", LayerKind::linear).empty() ? "cpu_dense_avx512" : "cpu_dense_avx2";
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    EXPECT_EQ(select_linear({kUnquantized, act, 151936, 2048, {}}, "lm_head").backend->name, best);
    EXPECT_EQ(select_moe({kUnquantized, act, 8, 2, 64, 32, {}}, "moe").backend->name, best);
  }
  // NVFP4 layers never land on a dense backend.
  EXPECT_EQ(select_linear({kNvfp4W4A16, DType::BF16, 64, 64, {}}, "x").backend->name.find("dense"), std::string::npos);
  const Selection s = select_linear({kUnquantized, DType::BF16, 64, 64, {}}, "lm_head");
  std::string candidates;
  for (const std::string& n : testing::backends_with_scheme(LayerKind::linear, kUnquantized)) candidates += n + ", ";
  EXPECT_EQ(selection_message(s, LayerKind::linear, kUnquantized),
            "Using '" + best + "' unquantized Linear backend out of potential backends: [" + candidates +
                "reference]");
  for (const std::string& n : testing::backends_with_scheme(LayerKind::linear, kUnquantized))
    EXPECT_NE(rejection_reason(*find_backend(n, LayerKind::linear), LinearProblem{kNvfp4W4A4, DType::BF16, 64, 64, {}}),
              "")
        << n;
}

// Dense experts through the grouped MoE: equal to the naive per-token loop over the same
// Linear kernels, close to the reference MoE, identical across thread counts.
TEST_P(DenseBackend, GroupedMoeEqualsNaiveLoop) {
  const std::string backend = GetParam();
  REQUIRE_BACKEND(backend, LayerKind::moe);
  const int64_t experts = 5, hidden = 40, inter = 24, top_k = 2;
  std::vector<std::shared_ptr<DenseLayer>> keep;
  MoeWeights mw;
  mw.key = kUnquantized;
  mw.num_experts = experts;
  mw.hidden = hidden;
  mw.inter = inter;
  for (int64_t e = 0; e < experts; ++e) {
    keep.push_back(make_dense(2 * inter, hidden, {inter, inter}, {DType::BF16}, false, 60 + e));
    mw.w13.push_back(weights_of(keep.back()));
    keep.push_back(make_dense(hidden, inter, {hidden}, {DType::BF16}, false, 80 + e));
    mw.w2.push_back(weights_of(keep.back()));
  }
  for (DType act : {DType::F32, DType::BF16}) {
    const MoeProblem p{kUnquantized, act, experts, top_k, hidden, inter, {}};
    auto grouped = find_backend(backend, LayerKind::moe)->make_moe(mw, p);
    auto ref = find_backend("reference", LayerKind::moe)->make_moe(mw, p);
    const Backend* lin = find_backend(backend, LayerKind::linear);
    for (int64_t m : {1, 9}) {
      SCOPED_TRACE(std::string(dtype_name(act)) + " m=" + std::to_string(m));
      std::mt19937 rng(static_cast<uint32_t>(m));
      std::vector<int32_t> ids;
      std::vector<float> wts;
      for (int64_t i = 0; i < m; ++i) {
        const int32_t a = static_cast<int32_t>(rng() % experts), b = static_cast<int32_t>((a + 1 + rng() % (experts - 1)) % experts);
        ids.insert(ids.end(), {a, b});
        wts.insert(wts.end(), {0.7f, 0.3f});
      }
      const std::vector<uint8_t> x = testing::to_act(testing::make_activations(m, hidden, 3), act);
      const size_t es = dtype_size(act);
      std::vector<std::vector<uint8_t>> outs;
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<uint8_t> y(static_cast<size_t>(m * hidden) * es);
        grouped->forward(x.data(), m, ids.data(), wts.data(), top_k, y.data(), pool);
        outs.push_back(y);
      }
      EXPECT_EQ(outs[0], outs[1]);
      EXPECT_EQ(outs[0], outs[2]);
      // Naive loop over the dense Linear kernels.
      ThreadPool pool(2);
      std::vector<float> yf(static_cast<size_t>(m * hidden), 0.0f);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < top_k; ++j) {
          const int32_t e = ids[i * top_k + j];
          auto k13 = lin->make_linear(mw.w13[e], {kUnquantized, act, 2 * inter, hidden, {}});
          auto k2 = lin->make_linear(mw.w2[e], {kUnquantized, act, hidden, inter, {}});
          std::vector<uint8_t> h(2 * inter * es), mid(inter * es), o(hidden * es);
          k13->forward(x.data() + i * hidden * es, 1, h.data(), pool);
          std::vector<float> hf = testing::from_act(h.data(), act, 2 * inter), a(inter);
          for (int64_t c = 0; c < inter; ++c) a[c] = hf[c] / (1.0f + std::exp(-hf[c])) * hf[inter + c];
          from_f32_n(a.data(), act, mid.data(), a.size());
          k2->forward(mid.data(), 1, o.data(), pool);
          std::vector<float> of = testing::from_act(o.data(), act, hidden);
          for (int64_t c = 0; c < hidden; ++c) yf[i * hidden + c] += wts[i * top_k + j] * of[c];
        }
      }
      EXPECT_EQ(outs[0], testing::to_act(yf, act));
      std::vector<uint8_t> yr(outs[0].size());
      ref->forward(x.data(), m, ids.data(), wts.data(), top_k, yr.data(), pool);
      const std::vector<float> a = testing::from_act(outs[0].data(), act, m * hidden),
                               b = testing::from_act(yr.data(), act, m * hidden);
      double e2 = 0, n2 = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        e2 += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
        n2 += static_cast<double>(b[i]) * b[i];
      }
      EXPECT_LE(std::sqrt(e2 / n2), act == DType::F32 ? 1e-5 : 1.5e-2);
    }
  }
}

}  // namespace
}  // namespace fp4lm::kernels::dense_cpu_kernels_test
