// The AVX2 NVFP4 backends (cpu_w4a16_avx2, cpu_w4a4_avx2) against fp64 evaluations of the same
// operands and against the `reference` backend, on odd shapes, all activation dtypes, with and
// without bias, fused shards with different global scales; thread-count determinism; the W4A4
// activation quantizer against quant::quantize_activation; --a16-max-tokens; oracle selection.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/cpu/nvfp4_avx2.h"
#include "kernels/registry.h"
#include "nvfp4_test_util.h"

namespace fp4lm::kernels {
namespace {

using testing::Expected;
using testing::LayerSpec;

using testing::have_avx2;

struct Case {
  int64_t n, k, m;
  DType act;
  bool bias;
  std::vector<int64_t> shards;
};

// Every N ∈ {1, 7, 64, 300}, K ∈ {16, 48, 272, 4096}, M ∈ {1, 2, 3, 8, 33, 130} and act dtype
// appears, with and without bias, with 1-3 shards; the full cross product would be slow.
const std::vector<Case> kCases = {
    {1, 16, 1, DType::F32, false, {1}},          {7, 48, 2, DType::BF16, true, {3, 4}},
    {64, 272, 3, DType::F16, false, {16, 16, 32}}, {300, 4096, 8, DType::F32, true, {100, 150, 50}},
    {7, 16, 33, DType::F16, true, {2, 5}},       {64, 4096, 1, DType::BF16, false, {32, 32}},
    {300, 272, 130, DType::BF16, true, {128, 128, 44}}, {1, 4096, 2, DType::F16, true, {1}},
    {64, 48, 130, DType::F32, true, {40, 24}},   {300, 16, 3, DType::BF16, false, {299, 1}},
    {7, 272, 8, DType::F32, false, {7}},         {64, 4096, 33, DType::F16, true, {8, 8, 48}},
    {1, 48, 130, DType::BF16, true, {1}},        {300, 4096, 1, DType::F16, false, {256, 32, 12}},
};

std::string describe(const Case& c) {
  return "n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " m=" + std::to_string(c.m) +
         " act=" + std::string(dtype_name(c.act)) + (c.bias ? " bias" : "") + " shards=" +
         std::to_string(c.shards.size());
}

using testing::make;
using testing::run;

// |y - e| <= 1e-5 · Σ|terms| (fp32 summation-order error of the products, relative to their
// magnitude) + half an ulp of the output dtype at e (bf16 2^-8, f16 2^-11 relative, plus f16's
// subnormal step; 0 for f32). Also the norm-wise relative error ||y - e|| / ||e|| <= 1e-5 for f32.
void expect_close(const std::vector<float>& y, const Expected& e, DType act, const std::string& what) {
  double err2 = 0, ref2 = 0;
  int reported = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double tol = 1e-5 * e.magnitude[i] + testing::output_rounding(act) * std::fabs(e.y[i]) +
                       (act == DType::F16 ? 0x1p-24 : 0.0) + 1e-30;
    const double d = std::fabs(static_cast<double>(y[i]) - e.y[i]);
    if (!(d <= tol) && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " = " << y[i] << ", expected " << e.y[i]
                    << " (|diff| " << d << " > tol " << tol << ")";
    err2 += d * d;
    ref2 += e.y[i] * e.y[i];
  }
  if (act == DType::F32 && ref2 > 0) {
    EXPECT_LE(std::sqrt(err2 / ref2), 1e-5) << what;
  }
}

void check_backend(const std::string& backend, QuantKey key, bool w4a4_math) {
  ThreadPool pool(2);
  uint32_t seed = 10;
  for (const Case& c : kCases) {
    SCOPED_TRACE(backend + " " + describe(c));
    auto layer = testing::make_layer({c.n, c.k, c.shards, c.bias, key, seed++});
    const LinearWeights w = testing::weights_of(layer);
    const std::vector<float> x = testing::make_activations(c.m, c.k, seed++);
    const std::vector<uint8_t> xa = testing::to_act(x, c.act);
    const std::vector<float> xr = testing::from_act(xa.data(), c.act, x.size());
    const Expected e = testing::expected_f64(w, xr, c.m, w4a4_math);
    auto kern = make(backend, w, c.act);
    expect_close(run(*kern, xa, c.m, c.n, c.act, pool), e, c.act, backend);
  }
}

TEST(Nvfp4CpuKernels, W4A16MatchesFp64OfDequantizedWeights) {
  REQUIRE_AVX2();
  check_backend("cpu_w4a16_avx2", kNvfp4W4A16, false);
}

TEST(Nvfp4CpuKernels, W4A4MatchesFp64OfQuantizedOperands) {
  REQUIRE_AVX2();
  check_backend("cpu_w4a4_avx2", kNvfp4W4A4, true);
}

// The W4A16 backend serves W4A4 checkpoints at 16-bit activations (override / forced).
TEST(Nvfp4CpuKernels, W4A16OnAW4A4LayerUsesUnquantizedActivations) {
  REQUIRE_AVX2();
  ThreadPool pool(1);
  auto layer = testing::make_layer({64, 272, {32, 32}, true, kNvfp4W4A4, 77});
  const LinearWeights w = testing::weights_of(layer);
  const std::vector<float> x = testing::make_activations(5, 272, 78);
  const std::vector<uint8_t> xa = testing::to_act(x, DType::F32);
  expect_close(run(*make("cpu_w4a16_avx2", w, DType::F32), xa, 5, 64, DType::F32, pool),
               testing::expected_f64(w, x, 5, false), DType::F32, "w4a16 on W4A4 layer");
}

// The oracle itself, at its own tolerance, on a few cases (keeps the test honest both ways).
TEST(Nvfp4CpuKernels, ReferenceBackendAgreesWithTheSameFp64) {
  ThreadPool pool(2);
  for (size_t i = 0; i < 6; ++i) {
    const Case& c = kCases[i];
    SCOPED_TRACE(describe(c));
    for (bool w4a4 : {false, true}) {
      auto layer = testing::make_layer({c.n, c.k, c.shards, c.bias, w4a4 ? kNvfp4W4A4 : kNvfp4W4A16, 5});
      const LinearWeights w = testing::weights_of(layer);
      const std::vector<float> x = testing::make_activations(c.m, c.k, 6);
      const std::vector<uint8_t> xa = testing::to_act(x, c.act);
      const std::vector<float> xr = testing::from_act(xa.data(), c.act, x.size());
      expect_close(run(*make("reference", w, c.act), xa, c.m, c.n, c.act, pool),
                   testing::expected_f64(w, xr, c.m, w4a4), c.act, "reference");
    }
  }
}

TEST(Nvfp4CpuKernels, ResultsIdenticalForAnyThreadCount) {
  REQUIRE_AVX2();
  for (const std::string backend : {"cpu_w4a16_avx2", "cpu_w4a4_avx2"}) {
    for (DType act : {DType::F32, DType::BF16}) {
      auto layer = testing::make_layer({300, 272, {100, 200}, true, kNvfp4W4A4, 21});
      const LinearWeights w = testing::weights_of(layer);
      const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(33, 272, 22), act);
      auto kern = make(backend, w, act);
      std::vector<std::vector<uint8_t>> outs;
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<uint8_t> y(33 * 300 * dtype_size(act));
        kern->forward(xa.data(), 33, y.data(), pool);
        outs.push_back(std::move(y));
      }
      EXPECT_EQ(outs[0], outs[1]) << backend;
      EXPECT_EQ(outs[0], outs[2]) << backend;
    }
  }
}

// A token's result does not depend on the other tokens of the call (no batch effects): each
// token's accumulation order is the same for every tile shape.
TEST(Nvfp4CpuKernels, TokenResultsIndependentOfBatch) {
  REQUIRE_AVX2();
  ThreadPool pool(2);
  for (const std::string backend : {"cpu_w4a16_avx2", "cpu_w4a4_avx2"}) {
    auto layer = testing::make_layer({64, 4096, {64}, false, kNvfp4W4A4, 31});
    auto kern = make(backend, testing::weights_of(layer), DType::F32);
    const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(13, 4096, 32), DType::F32);
    std::vector<float> all(13 * 64), one(64);
    kern->forward(xa.data(), 13, all.data(), pool);
    for (int t = 0; t < 13; ++t) {
      kern->forward(xa.data() + t * 4096 * 4, 1, one.data(), pool);
      EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * 64, 64 * sizeof(float))) << backend << " token " << t;
    }
  }
}

TEST(Nvfp4CpuKernels, ActivationQuantizerBitIdenticalToReference) {
  REQUIRE_AVX2();
  // Random rows over many magnitudes, plus a crafted row at input_scale 1 (so y = x exactly):
  // every threshold value, just-above/below values, -0.1 (-> code 0x8), a clamped value, an
  // all-zero block, and a block too small to represent (scale 0).
  const int64_t k = 272;
  std::vector<float> x = testing::make_activations(9, k, 41, 3.0f);
  for (int64_t t = 0; t < 3; ++t)
    for (int64_t j = 0; j < k; ++j) x[t * k + j] *= std::exp2(static_cast<float>(j % 40) - 20.0f);
  std::vector<float> crafted(static_cast<size_t>(k), 0.0f);
  const float edges[16] = {0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.0f, 6.0f,
                           -0.25f, -0.75f, -0.1f, 0.2500001f, 0.7499999f, -5.0000005f, 1e-3f, 0.0f};
  for (int j = 0; j < 16; ++j) crafted[j] = edges[j];
  for (int j = 16; j < 32; ++j) crafted[j] = (j - 16) * 0.5f;  // amax 7.5: scale 1.25
  for (int j = 48; j < 64; ++j) crafted[j] = 1e-6f * (j % 2 ? -1.0f : 1.0f);
  for (int j = 64; j < 80; ++j) crafted[j] = 1e5f * (j - 70);  // clamped to 448
  for (float input_scale : {1.0f, 0.0123f, 3.5e-4f}) {
    SCOPED_TRACE(input_scale);
    for (int rows : {9, 1}) {
      const float* src = rows == 9 ? x.data() : crafted.data();
      std::vector<uint8_t> codes(rows * k / 2, 0xEE), scales(rows * k / 16, 0xEE);
      cpu::quantize_activation_nvfp4_avx2(src, rows, k, input_scale, codes.data(), scales.data());
      const quant::Nvfp4Activation ref = quant::quantize_activation(src, rows, k, input_scale);
      EXPECT_EQ(codes, ref.codes);
      EXPECT_EQ(scales, ref.scales);
    }
  }
  std::vector<float> bad(32, 1.0f);
  bad[17] = std::nanf("");
  std::vector<uint8_t> codes(16), scales(2);
  EXPECT_THROW(cpu::quantize_activation_nvfp4_avx2(bad.data(), 1, 32, 1.0f, codes.data(), scales.data()), Error);
  bad[17] = INFINITY;
  EXPECT_THROW(cpu::quantize_activation_nvfp4_avx2(bad.data(), 1, 32, 1.0f, codes.data(), scales.data()), Error);
}

TEST(Nvfp4CpuKernels, W4A4ForwardRejectsNonFiniteActivations) {
  REQUIRE_AVX2();
  ThreadPool pool(1);
  auto layer = testing::make_layer({7, 48, {7}, false, kNvfp4W4A4, 51});
  auto kern = make("cpu_w4a4_avx2", testing::weights_of(layer), DType::F32);
  std::vector<float> x(2 * 48, 0.5f), y(2 * 7);
  x[48 + 30] = NAN;
  EXPECT_THROW(kern->forward(x.data(), 2, y.data(), pool), Error);
}

// With 2 threads token 1 is quantized on the worker thread: its error must reach the caller as the
// same clear Error (it used to abort the process), and the pool must then run a good call in full.
TEST(Nvfp4CpuKernels, W4A4NonFiniteActivationOnAWorkerThreadIsACleanError) {
  REQUIRE_AVX2();
  ThreadPool pool(2);
  auto layer = testing::make_layer({7, 48, {7}, false, kNvfp4W4A4, 51});
  const LinearWeights w = testing::weights_of(layer);
  auto kern = make("cpu_w4a4_avx2", w, DType::F32);
  std::vector<float> x(2 * 48, 0.5f), y(2 * 7);
  x[48 + 30] = NAN;
  std::string msg;
  try {
    kern->forward(x.data(), 2, y.data(), pool);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("element [1, 30] is nan"), std::string::npos) << msg;
  x[48 + 30] = 0.25f;
  const std::vector<uint8_t> xa = testing::to_act(x, DType::F32);
  ThreadPool one(1);
  EXPECT_EQ(run(*kern, xa, 2, 7, DType::F32, pool), run(*kern, xa, 2, 7, DType::F32, one));
  std::vector<int> elsewhere(2, -1);
  const auto caller = std::this_thread::get_id();
  pool.parallel_for(2, [&](int64_t, int64_t, int t) { elsewhere[t] = std::this_thread::get_id() != caller; });
  EXPECT_EQ(elsewhere, (std::vector<int>{0, 1}));
}

TEST(Nvfp4CpuKernels, A16MaxTokensRunsW4A16OnTheSameWeights) {
  REQUIRE_AVX2();
  ThreadPool pool(2);
  auto layer = testing::make_layer({64, 272, {32, 32}, true, kNvfp4W4A4, 61});
  const LinearWeights w = testing::weights_of(layer);
  auto a4 = make("cpu_w4a4_avx2", w, DType::BF16);
  auto a16 = make("cpu_w4a16_avx2", w, DType::BF16);
  auto mixed = make("cpu_w4a4_avx2", w, DType::BF16, KernelOptions{4});
  const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(5, 272, 62), DType::BF16);
  for (int64_t m : {1, 4, 5}) {
    std::vector<uint8_t> expect(m * 64 * 2), got(m * 64 * 2);
    (m <= 4 ? a16 : a4)->forward(xa.data(), m, expect.data(), pool);
    mixed->forward(xa.data(), m, got.data(), pool);
    EXPECT_EQ(expect, got) << "m=" << m;
  }
  // And the two paths really differ (the 4-bit activations are visible).
  std::vector<uint8_t> y4(64 * 2), y16(64 * 2);
  a4->forward(xa.data(), 1, y4.data(), pool);
  a16->forward(xa.data(), 1, y16.data(), pool);
  EXPECT_NE(y4, y16);
}

TEST(Nvfp4CpuKernels, BadWeightsAreLoadErrors) {
  REQUIRE_AVX2();
  auto layer = testing::make_layer({7, 48, {3, 4}, false, kNvfp4W4A4, 71});
  LinearWeights w = testing::weights_of(layer);
  LinearProblem p{w.key, DType::F32, 7, 48, {}};
  const Backend* b = find_backend("cpu_w4a4_avx2", LayerKind::linear);
  {
    LinearWeights bad = w;
    bad.input_scale = 0.0f;
    EXPECT_THROW(b->make_linear(bad, p), Error);
  }
  {
    LinearWeights bad = w;
    bad.shards[1].rows = 3;
    EXPECT_THROW(b->make_linear(bad, p), Error);
  }
  {
    layer->shards[1].scales[5] = 0x7F;  // E4M3 NaN
    try {
      b->make_linear(w, p);
      ADD_FAILURE() << "NaN block scale accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("test.layer.shard1"), std::string::npos) << e.what();
    }
  }
}

TEST(Nvfp4CpuKernels, OracleSelectsTheAvx2Backends) {
  REQUIRE_AVX2();
  LinearProblem p{kNvfp4W4A4, DType::BF16, 64, 272, {}};
  EXPECT_EQ(select_linear(p, "l").backend->name, "cpu_w4a4_avx2");
  p.key = kNvfp4W4A16;
  EXPECT_EQ(select_linear(p, "l").backend->name, "cpu_w4a16_avx2");
  p.key = kUnquantized;
  EXPECT_EQ(select_linear(p, "l").backend->name, "cpu_dense_avx2");
  p.key = kNvfp4W4A4;
  p.k = 40;  // not a multiple of 16: the AVX2 kernels decline with a reason
  EXPECT_NE(rejection_reason(*find_backend("cpu_w4a4_avx2", LayerKind::linear), p), "");
  MoeProblem mp{kNvfp4W4A4, DType::F16, 8, 2, 64, 32, {}};
  EXPECT_EQ(select_moe(mp, "moe").backend->name, "cpu_w4a4_avx2");
  mp.key = kNvfp4W4A16;
  EXPECT_EQ(select_moe(mp, "moe").backend->name, "cpu_w4a16_avx2");
  const Selection s = select_moe(mp, "moe");
  EXPECT_EQ(selection_message(s, LayerKind::moe, mp.key),
            "Using 'cpu_w4a16_avx2' NVFP4 MoE backend out of potential backends: "
            "[cpu_w4a4_avx2, cpu_w4a16_avx2, reference]");
}

TEST(Nvfp4CpuKernels, AvailabilityFollowsCpuFeatures) {
  const Backend* b = find_backend("cpu_w4a16_avx2", LayerKind::linear);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->unavailable_reason);
  if (have_avx2()) {
    EXPECT_EQ(b->unavailable_reason(), "");
  } else {
    EXPECT_NE(b->unavailable_reason().find("CPU lacks"), std::string::npos);
  }
}

}  // namespace
}  // namespace fp4lm::kernels
