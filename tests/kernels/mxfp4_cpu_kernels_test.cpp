// MXFP4 (E2M1 codes, an E8M0 scale per 32) on every registered backend that runs it: the NVFP4
// W4A16 backends (AVX2, AVX-512; through the exact NVFP4 re-expression, quant/mxfp4.h) and
// `reference`. Each fast backend's output equals, bit for bit, the same backend on the NVFP4 form of
// the same numbers (which the NVFP4 tests check against fp64), and is near fp64 of the decoded
// weights; reference matches fp64; the grouped MoE matches reference's; out-of-range rows are
// load errors; the oracle picks a fast backend.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/error_of.h"
#include "kernels/registry.h"
#include "kernel_test_support.h"
#include "quant/mxfp4.h"

namespace fp4lm::kernels::mxfp4_cpu_kernels_test {
namespace {

struct Mx {
  std::vector<uint8_t> codes, scales;  // whole layer [n, k/2], [n, k/32]
  std::vector<uint8_t> e4m3;           // the NVFP4 form's block scales [n, k/16]
  std::vector<float> global;           // its per-row global scales
  LinearWeights mxfp4, nvfp4;
};

std::shared_ptr<Mx> make_mx(int64_t n, int64_t k, const std::vector<int64_t>& shard_rows, bool bias, uint32_t seed) {
  auto l = std::make_shared<Mx>();
  std::mt19937 rng(seed);
  l->codes.resize(static_cast<size_t>(n * k / 2));
  l->scales.resize(static_cast<size_t>(n * k / 32));
  l->e4m3.resize(static_cast<size_t>(n * k / 16));
  l->global.resize(static_cast<size_t>(n));
  for (auto& c : l->codes) c = static_cast<uint8_t>(rng());
  for (int64_t r = 0; r < n; ++r) {
    const int base = 115 + static_cast<int>(rng() % 8);
    for (int64_t b = 0; b < k / 32; ++b) l->scales[r * (k / 32) + b] = static_cast<uint8_t>(base + rng() % 6);
  }
  l->mxfp4.key = kMxfp4W4A16;
  l->nvfp4.key = kNvfp4W4A16;
  l->mxfp4.n = l->nvfp4.n = n;
  l->mxfp4.k = l->nvfp4.k = k;
  int64_t r0 = 0;
  for (size_t i = 0; i < shard_rows.size(); ++i) {
    WeightShard s;
    s.name = "test.mxfp4.shard" + std::to_string(i);
    s.rows = shard_rows[i];
    s.view = Mxfp4View{l->codes.data() + r0 * k / 2, l->scales.data() + r0 * k / 32};
    l->mxfp4.shards.push_back(s);
    for (int64_t r = r0; r < r0 + shard_rows[i]; ++r) {
      EXPECT_EQ(quant::mxfp4_row_as_nvfp4(l->codes.data() + r * k / 2, l->scales.data() + r * k / 32, k,
                                          l->e4m3.data() + r * k / 16, l->global[r]),
                "");
      WeightShard row;  // the NVFP4 form: one shard per row (its own global scale)
      row.name = s.name + ".row" + std::to_string(r);
      row.rows = 1;
      row.view = Nvfp4View{l->codes.data() + r * k / 2, l->e4m3.data() + r * k / 16, l->global[r], 0.0f};
      l->nvfp4.shards.push_back(row);
    }
    r0 += shard_rows[i];
  }
  if (bias)
    for (int64_t r = 0; r < n; ++r) l->mxfp4.bias.push_back(0.01f * static_cast<float>(r % 13) - 0.05f);
  l->nvfp4.bias = l->mxfp4.bias;
  return l;
}

LinearWeights with_keepalive(LinearWeights w, const std::shared_ptr<Mx>& l) {
  w.keepalive = l;
  return w;
}

testing::Expected expected_f64(const Mx& l, const std::vector<float>& x, int64_t m) {
  const LinearWeights& w = l.mxfp4;
  const std::vector<float> deq = quant::dequantize_mxfp4(l.codes.data(), l.scales.data(), w.n, w.k);
  return testing::linear_f64(w, std::vector<double>(x.begin(), x.end()), m, [&](int64_t r) {
    return std::vector<double>(deq.begin() + r * w.k, deq.begin() + (r + 1) * w.k);
  });
}

double rel_l2(const std::vector<float>& y, const std::vector<double>& e) {
  double d = 0, n = 0;
  for (size_t i = 0; i < y.size(); ++i) d += (y[i] - e[i]) * (y[i] - e[i]), n += e[i] * e[i];
  return std::sqrt(d / n);
}

std::vector<std::string> fast_backends() {
  std::vector<std::string> out;
  for (const std::string& b : testing::backends_with_scheme(LayerKind::linear, kMxfp4W4A16))
    if (testing::unavailable(b, LayerKind::linear).empty()) out.push_back(b);
  return out;
}

TEST(Mxfp4CpuKernels, TheW4A16BackendsRunIt) {
  EXPECT_EQ(testing::backends_with_scheme(LayerKind::linear, kMxfp4W4A16),
            testing::backends_with_scheme(LayerKind::linear, kNvfp4W4A16));
  if (testing::have_avx2()) {
    EXPECT_FALSE(fast_backends().empty());
  }
  EXPECT_TRUE(find_backend("reference", LayerKind::linear)->supports(kMxfp4W4A16));
  EXPECT_EQ(scheme_name(kMxfp4W4A16), "mxfp4_w4a16");
}

TEST(Mxfp4CpuKernels, BitIdenticalToTheNvfp4FormAndNearFp64) {
  struct Case {
    int64_t n, k, m;
    DType act;
    bool bias;
    std::vector<int64_t> shards;
  };
  const std::vector<Case> cases = {{8, 32, 1, DType::BF16, false, {8}},
                                   {96, 2880, 1, DType::BF16, true, {64, 32}},  // gpt-oss's hidden size
                                   {40, 320, 5, DType::F16, false, {40}},
                                   {33, 96, 40, DType::F32, true, {10, 23}}};
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (const Case& c : cases) {
    auto l = make_mx(c.n, c.k, c.shards, c.bias, seed++);
    const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(c.m, c.k, seed++), c.act);
    const std::vector<float> xr = testing::from_act(xa.data(), c.act, static_cast<size_t>(c.m * c.k));
    const testing::Expected e = expected_f64(*l, xr, c.m);
    const std::vector<float> yr =
        testing::run(*testing::make("reference", with_keepalive(l->mxfp4, l), c.act), xa, c.m, c.n, c.act, pool);
    for (size_t i = 0; i < yr.size(); ++i)
      ASSERT_NEAR(yr[i], e.y[i], 1e-6 * e.magnitude[i] + testing::output_rounding(c.act) * std::fabs(e.y[i]) + 1e-30);
    for (const std::string& b : fast_backends()) {
      SCOPED_TRACE(b + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " m=" + std::to_string(c.m));
      const std::vector<float> ym =
          testing::run(*testing::make(b, with_keepalive(l->mxfp4, l), c.act), xa, c.m, c.n, c.act, pool);
      const std::vector<float> yn =
          testing::run(*testing::make(b, with_keepalive(l->nvfp4, l), c.act), xa, c.m, c.n, c.act, pool);
      ASSERT_EQ(0, std::memcmp(ym.data(), yn.data(), ym.size() * sizeof(float)));
      EXPECT_LT(rel_l2(ym, e.y), 5e-3);
    }
  }
}

TEST(Mxfp4CpuKernels, GroupedMoeMatchesReferenceMoe) {
  const int64_t experts = 3, hidden = 64, inter = 96, top_k = 2, m = 12;
  MoeWeights mw;
  mw.key = kMxfp4W4A16;
  mw.num_experts = experts;
  mw.hidden = hidden;
  mw.inter = inter;
  std::vector<std::shared_ptr<Mx>> keep;
  for (int64_t e = 0; e < experts; ++e) {
    keep.push_back(make_mx(2 * inter, hidden, {inter, inter}, false, 30 + static_cast<uint32_t>(e)));
    mw.w13.push_back(with_keepalive(keep.back()->mxfp4, keep.back()));
    keep.push_back(make_mx(hidden, inter, {hidden}, false, 40 + static_cast<uint32_t>(e)));
    mw.w2.push_back(with_keepalive(keep.back()->mxfp4, keep.back()));
  }
  std::vector<int32_t> ids;
  std::vector<float> wts;
  for (int64_t i = 0; i < m; ++i) {
    ids.push_back(static_cast<int32_t>(i % experts));
    ids.push_back(static_cast<int32_t>((i + 1) % experts));
    wts.push_back(0.75f);
    wts.push_back(0.25f);
  }
  const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, hidden, 5, 0.05f), DType::BF16);
  ThreadPool pool(2);
  auto run_moe = [&](const std::string& name) {
    const Backend* b = find_backend(name, LayerKind::moe);
    MoeProblem p{kMxfp4W4A16, DType::BF16, experts, top_k, hidden, inter, {}};
    EXPECT_EQ(rejection_reason(*b, p), "");
    std::vector<uint16_t> y(static_cast<size_t>(m * hidden));
    b->make_moe(mw, p)->forward(xa.data(), m, ids.data(), wts.data(), top_k, y.data(), pool);
    return testing::from_act(y.data(), DType::BF16, y.size());
  };
  const std::vector<float> ref = run_moe("reference");
  for (const Backend* b : backends(LayerKind::moe)) {
    if (b->name == "reference" || !b->supports(kMxfp4W4A16) || !b->unavailable_reason().empty()) continue;
    SCOPED_TRACE(b->name);
    const std::vector<float> y = run_moe(b->name);
    double d = 0, n = 0;
    for (size_t i = 0; i < y.size(); ++i) d += (y[i] - ref[i]) * (y[i] - ref[i]), n += ref[i] * ref[i];
    EXPECT_GT(n, 0.0);
    EXPECT_LT(std::sqrt(d / n), 1e-2);  // bf16 intermediates; AVX2's int16 activations
  }
}

TEST(Mxfp4CpuKernels, ScalesBeyondWhatTheNvfp4FormHoldsAreLoadErrorsAndTheOraclePicksAFastBackend) {
  for (const std::string& b : fast_backends()) {
    auto l = make_mx(4, 64, {4}, false, 9);
    l->scales[2 * 2] = 10;  // row 2, block 0: far below the row's others (~2^-10)
    const std::string e = test::error_of([&] { testing::make(b, with_keepalive(l->mxfp4, l), DType::BF16); });
    EXPECT_NE(e.find("test.mxfp4.shard0: row 2: block 0: scale 2^-117 is more than 2^17 below"), std::string::npos) << e;
  }
  const Selection s = select_linear({kMxfp4W4A16, DType::BF16, 64, 64, {}}, "x");
  if (!fast_backends().empty()) {
    EXPECT_EQ(s.backend->name, fast_backends().front());
  }
  EXPECT_EQ(selection_message(s, LayerKind::linear, kMxfp4W4A16).rfind("Using '" + s.backend->name + "' MXFP4 Linear", 0),
            0u);
}

}  // namespace
}  // namespace fp4lm::kernels::mxfp4_cpu_kernels_test
