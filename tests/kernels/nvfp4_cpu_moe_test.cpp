// The grouped MoE of the AVX2 backends: bit-identical to a naive per-token, per-expert loop over
// the same backend's Linear kernels (the grouped path changes only the order of work, and a
// token's result never depends on the other tokens of a GEMM), close to the `reference` MoE,
// deterministic across thread counts, and honouring --a16-max-tokens at the call level.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/registry.h"
#include "kernel_test_support.h"

namespace fp4lm::kernels::nvfp4_cpu_moe_test {
namespace {


struct TestMoe {
  std::vector<std::shared_ptr<testing::TestLayer>> layers;
  MoeWeights weights;
};

TestMoe make_moe(int64_t experts, int64_t hidden, int64_t inter, QuantKey key, uint32_t seed) {
  TestMoe t;
  t.weights.key = key;
  t.weights.num_experts = experts;
  t.weights.hidden = hidden;
  t.weights.inter = inter;
  for (int64_t e = 0; e < experts; ++e) {
    // w13 = gate then up, two shards with different global scales.
    auto w13 = testing::make_layer({2 * inter, hidden, {inter, inter}, false, key, seed++});
    auto w2 = testing::make_layer({hidden, inter, {hidden}, false, key, seed++});
    w13->weights.shards[0].name = "experts." + std::to_string(e) + ".gate_proj";
    w13->weights.shards[1].name = "experts." + std::to_string(e) + ".up_proj";
    t.weights.w13.push_back(testing::weights_of(w13));
    t.weights.w2.push_back(testing::weights_of(w2));
    t.layers.push_back(w13);
    t.layers.push_back(w2);
  }
  return t;
}

struct Routing {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

// top_k distinct experts per token; expert `experts - 1` is never used.
Routing make_routing(int64_t m, int64_t top_k, int64_t experts, uint32_t seed) {
  std::mt19937 rng(seed);
  Routing r;
  for (int64_t i = 0; i < m; ++i) {
    std::vector<int32_t> all(static_cast<size_t>(experts - 1));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    float sum = 0;
    std::vector<float> w;
    for (int64_t j = 0; j < top_k; ++j) {
      r.ids.push_back(all[j]);
      w.push_back(std::uniform_real_distribution<float>(0.1f, 1.0f)(rng));
      sum += w.back();
    }
    for (float v : w) r.weights.push_back(v / sum);
  }
  return r;
}

std::unique_ptr<MoeKernel> make_moe_kernel(const std::string& backend, const MoeWeights& w, DType act,
                                           KernelOptions opt = {}) {
  const Backend* b = find_backend(backend, LayerKind::moe);
  EXPECT_NE(b, nullptr);
  MoeProblem p{w.key, act, w.num_experts, 2, w.hidden, w.inter, opt};
  EXPECT_EQ(rejection_reason(*b, p), "");
  return b->make_moe(w, p);
}

// The naive loop of ReferenceMoe, but over `linear_backend`'s kernels.
std::vector<uint8_t> naive_moe(const std::string& linear_backend, const MoeWeights& w, DType act,
                               const std::vector<uint8_t>& x, int64_t m, const Routing& r, int64_t top_k,
                               ThreadPool& pool) {
  const Backend* b = find_backend(linear_backend, LayerKind::linear);
  const size_t es = dtype_size(act);
  std::vector<std::unique_ptr<LinearKernel>> w13, w2;
  for (int64_t e = 0; e < w.num_experts; ++e) {
    w13.push_back(b->make_linear(w.w13[e], {w.key, act, 2 * w.inter, w.hidden, {}}));
    w2.push_back(b->make_linear(w.w2[e], {w.key, act, w.hidden, w.inter, {}}));
  }
  std::vector<float> yf(static_cast<size_t>(m * w.hidden), 0.0f);
  std::vector<uint8_t> h13(2 * w.inter * es), mid(w.inter * es), out(w.hidden * es);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = r.ids[i * top_k + j];
      w13[e]->forward(x.data() + i * w.hidden * es, 1, h13.data(), pool);
      std::vector<float> h = testing::from_act(h13.data(), act, 2 * w.inter), a(w.inter);
      for (int64_t c = 0; c < w.inter; ++c) a[c] = h[c] / (1.0f + std::exp(-h[c])) * h[w.inter + c];
      from_f32_n(a.data(), act, mid.data(), a.size());
      w2[e]->forward(mid.data(), 1, out.data(), pool);
      std::vector<float> o = testing::from_act(out.data(), act, w.hidden);
      for (int64_t c = 0; c < w.hidden; ++c) yf[i * w.hidden + c] += r.weights[i * top_k + j] * o[c];
    }
  }
  return testing::to_act(yf, act);
}

double rel_norm_error(const std::vector<float>& y, const std::vector<float>& ref) {
  double e = 0, n = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    e += (static_cast<double>(y[i]) - ref[i]) * (static_cast<double>(y[i]) - ref[i]);
    n += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(e / n);
}

// Every registered NVFP4 MoE backend (every ISA), skipped with its own unavailable_reason.
class Nvfp4MoeBackend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { REQUIRE_BACKEND(GetParam(), LayerKind::moe); }
};
class W4a4MoeBackend : public Nvfp4MoeBackend {};
class W4a16MoeBackend : public Nvfp4MoeBackend {};

INSTANTIATE_TEST_SUITE_P(All, Nvfp4MoeBackend,
                         ::testing::ValuesIn(testing::concat(
                             testing::backends_with_scheme(LayerKind::moe, kNvfp4W4A16),
                             testing::backends_with_scheme(LayerKind::moe, kNvfp4W4A4))),
                         testing::BackendName());
INSTANTIATE_TEST_SUITE_P(All, W4a4MoeBackend,
                         ::testing::ValuesIn(testing::backends_with_scheme(LayerKind::moe, kNvfp4W4A4)),
                         testing::BackendName());
INSTANTIATE_TEST_SUITE_P(All, W4a16MoeBackend,
                         ::testing::ValuesIn(testing::backends_with_scheme(LayerKind::moe, kNvfp4W4A16)),
                         testing::BackendName());

bool is_w4a4(const std::string& backend) {
  const auto names = testing::backends_with_scheme(LayerKind::moe, kNvfp4W4A4);
  return std::find(names.begin(), names.end(), backend) != names.end();
}

TEST_P(Nvfp4MoeBackend, GroupedEqualsNaiveLoopAndIsCloseToReference) {
  ThreadPool pool(2);
  const int64_t experts = 6, hidden = 80, inter = 48, top_k = 2;
  {
    const std::string backend = GetParam();
    const QuantKey key = is_w4a4(backend) ? kNvfp4W4A4 : kNvfp4W4A16;
    TestMoe moe = make_moe(experts, hidden, inter, key, 100);
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {
      auto grouped = make_moe_kernel(backend, moe.weights, act);
      auto ref = make_moe_kernel("reference", moe.weights, act);
      for (int64_t m : {1, 7, 33}) {
        SCOPED_TRACE(backend + " " + std::string(dtype_name(act)) + " m=" + std::to_string(m));
        const Routing r = make_routing(m, top_k, experts, 7 + static_cast<uint32_t>(m));
        const std::vector<uint8_t> x = testing::to_act(testing::make_activations(m, hidden, 3 + m, 4.0f), act);
        std::vector<uint8_t> y(m * hidden * dtype_size(act)), yr(y.size());
        grouped->forward(x.data(), m, r.ids.data(), r.weights.data(), top_k, y.data(), pool);
        EXPECT_EQ(y, naive_moe(backend, moe.weights, act, x, m, r, top_k, pool));
        ref->forward(x.data(), m, r.ids.data(), r.weights.data(), top_k, yr.data(), pool);
        // Against the reference MoE the only differences are the fp32 vs fp64 sums inside the
        // Linear layers, which can flip an act-dtype rounding of h13 / the intermediate (and,
        // for W4A4, then an activation code): norm-wise relative error bounds per act dtype.
        const double tol = act == DType::F32 ? 1e-5 : act == DType::F16 ? 2e-3 : 1.5e-2;
        const double err = rel_norm_error(testing::from_act(y.data(), act, m * hidden),
                                          testing::from_act(yr.data(), act, m * hidden));
        EXPECT_LE(err, tol);
      }
    }
  }
}

// --activation-scale dynamic (every expert's per_token_input_scale): the grouped MoE equals the
// naive loop over the same backend's Linears, each token equals itself alone (its scale is its
// own at every projection), and the reference MoE agrees within the act-dtype bound.
TEST_P(W4a4MoeBackend, DynamicActivationScaleIsPerTokenInEveryExpert) {
  const std::string backend = GetParam();
  ThreadPool pool(2);
  const int64_t experts = 5, hidden = 64, inter = 48, top_k = 2, m = 13;
  TestMoe moe = make_moe(experts, hidden, inter, kNvfp4W4A4, 700);
  for (auto* part : {&moe.weights.w13, &moe.weights.w2})
    for (LinearWeights& w : *part) {
      w.per_token_input_scale = true;
      w.input_scale = 0.0f;
    }
  const Routing r = make_routing(m, top_k, experts, 17);
  std::vector<float> xf = testing::make_activations(m, hidden, 18, 4.0f);
  for (int64_t j = 0; j < hidden; ++j) xf[3 * hidden + j] *= 4096.0f;  // a huge batch-mate
  const DType act = DType::BF16;
  const std::vector<uint8_t> x = testing::to_act(xf, act);
  auto grouped = make_moe_kernel(backend, moe.weights, act);
  std::vector<uint8_t> y(m * hidden * 2), one(hidden * 2), yr(y.size());
  grouped->forward(x.data(), m, r.ids.data(), r.weights.data(), top_k, y.data(), pool);
  EXPECT_EQ(y, naive_moe(backend, moe.weights, act, x, m, r, top_k, pool));
  for (int64_t i = 0; i < m; ++i) {
    grouped->forward(x.data() + i * hidden * 2, 1, r.ids.data() + i * top_k, r.weights.data() + i * top_k, top_k,
                     one.data(), pool);
    EXPECT_EQ(0, std::memcmp(one.data(), y.data() + i * hidden * 2, hidden * 2)) << "token " << i;
  }
  make_moe_kernel("reference", moe.weights, act)
      ->forward(x.data(), m, r.ids.data(), r.weights.data(), top_k, yr.data(), pool);
  EXPECT_LE(rel_norm_error(testing::from_act(y.data(), act, m * hidden), testing::from_act(yr.data(), act, m * hidden)),
            1.5e-2);
}

TEST_P(W4a4MoeBackend, DeterministicAcrossThreadCountsAndA16AtCallLevel) {
  const std::string backend = GetParam(), sibling = testing::w4a16_sibling(backend);
  REQUIRE_BACKEND(sibling, LayerKind::moe);
  const int64_t experts = 5, hidden = 64, inter = 32, top_k = 2, m = 9;
  TestMoe moe = make_moe(experts, hidden, inter, kNvfp4W4A4, 300);
  const Routing r = make_routing(m, top_k, experts, 11);
  const std::vector<uint8_t> x = testing::to_act(testing::make_activations(m, hidden, 12, 4.0f), DType::BF16);
  auto a4 = make_moe_kernel(backend, moe.weights, DType::BF16);
  std::vector<std::vector<uint8_t>> outs;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<uint8_t> y(m * hidden * 2);
    a4->forward(x.data(), m, r.ids.data(), r.weights.data(), top_k, y.data(), pool);
    outs.push_back(y);
  }
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);

  // a16_max_tokens = 9: the whole call runs at W4A16, like the W4A16 backend on these weights.
  ThreadPool pool(2);
  auto mixed = make_moe_kernel(backend, moe.weights, DType::BF16, KernelOptions{9});
  auto a16 = make_moe_kernel(sibling, moe.weights, DType::BF16);
  std::vector<uint8_t> ym(m * hidden * 2), y16(ym.size());
  mixed->forward(x.data(), m, r.ids.data(), r.weights.data(), top_k, ym.data(), pool);
  a16->forward(x.data(), m, r.ids.data(), r.weights.data(), top_k, y16.data(), pool);
  EXPECT_EQ(ym, y16);
  EXPECT_NE(ym, outs[0]);
  // One token more than the limit: the whole call at W4A4.
  auto mixed8 = make_moe_kernel(backend, moe.weights, DType::BF16, KernelOptions{8});
  mixed8->forward(x.data(), m, r.ids.data(), r.weights.data(), top_k, ym.data(), pool);
  EXPECT_EQ(ym, outs[0]);
}

TEST_P(W4a16MoeBackend, BadExpertIdsAndShapesAreErrors) {
  TestMoe moe = make_moe(3, 32, 16, kNvfp4W4A16, 400);
  auto k = make_moe_kernel(GetParam(), moe.weights, DType::F32);
  ThreadPool pool(1);
  std::vector<float> x(32, 1.0f), y(32);
  const int32_t ids[2] = {0, 3};
  const float w[2] = {0.5f, 0.5f};
  EXPECT_THROW(k->forward(x.data(), 1, ids, w, 2, y.data(), pool), Error);
  MoeWeights bad = moe.weights;
  bad.w2.pop_back();
  const Backend* b = find_backend(GetParam(), LayerKind::moe);
  EXPECT_THROW(b->make_moe(bad, {kNvfp4W4A16, DType::F32, 3, 2, 32, 16, {}}), Error);
}

}  // namespace
}  // namespace fp4lm::kernels::nvfp4_cpu_moe_test
