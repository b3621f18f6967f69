// The AVX2 NVFP4 backends (cpu_w4a16_avx2, cpu_w4a4_avx2) against fp64 evaluations of the same
// operands and against the `reference` backend, on odd shapes, all activation dtypes, with and
// without bias, fused shards with different global scales; thread-count determinism; the W4A4
// activation quantizer against quant::quantize_activation; --a16-max-tokens; oracle selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/cpu/avx2/nvfp4.h"
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

bool is_w4a4(const std::string& backend) {
  const auto names = testing::backends_with_scheme(LayerKind::linear, kNvfp4W4A4);
  return std::find(names.begin(), names.end(), backend) != names.end();
}

// Every registered NVFP4 Linear backend (W4A16 and W4A4, every ISA), skipped with its own
// unavailable_reason where this CPU cannot run it.
class Nvfp4Backend : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { REQUIRE_BACKEND(GetParam(), LayerKind::linear); }
};
class W4a16Backend : public Nvfp4Backend {};
class W4a4Backend : public Nvfp4Backend {};

INSTANTIATE_TEST_SUITE_P(All, Nvfp4Backend,
                         ::testing::ValuesIn(testing::concat(
                             testing::backends_with_scheme(LayerKind::linear, kNvfp4W4A16),
                             testing::backends_with_scheme(LayerKind::linear, kNvfp4W4A4))),
                         testing::BackendName());
INSTANTIATE_TEST_SUITE_P(All, W4a16Backend,
                         ::testing::ValuesIn(testing::backends_with_scheme(LayerKind::linear, kNvfp4W4A16)),
                         testing::BackendName());
INSTANTIATE_TEST_SUITE_P(All, W4a4Backend,
                         ::testing::ValuesIn(testing::backends_with_scheme(LayerKind::linear, kNvfp4W4A4)),
                         testing::BackendName());

// The backend against fp64 of its own operands (W4A16: the act-dtype x times the dequantized
// weights; W4A4: both quantized by the reference rules) and against the `reference` backend.
TEST_P(Nvfp4Backend, MatchesFp64AndReference) {
  const std::string backend = GetParam();
  const bool w4a4 = is_w4a4(backend);
  const QuantKey key = w4a4 ? kNvfp4W4A4 : kNvfp4W4A16;
  ThreadPool pool(2);
  uint32_t seed = 10;
  for (const Case& c : kCases) {
    SCOPED_TRACE(backend + " " + describe(c));
    auto layer = testing::make_layer({c.n, c.k, c.shards, c.bias, key, seed++});
    const LinearWeights w = testing::weights_of(layer);
    const std::vector<float> x = testing::make_activations(c.m, c.k, seed++);
    const std::vector<uint8_t> xa = testing::to_act(x, c.act);
    const std::vector<float> xr = testing::from_act(xa.data(), c.act, x.size());
    const Expected e = testing::expected_f64(w, xr, c.m, w4a4);
    const std::vector<float> y = run(*make(backend, w, c.act), xa, c.m, c.n, c.act, pool);
    expect_close(y, e, c.act, backend);
    // And the oracle on the same call: both within the fp64 bound of each other's operands.
    const std::vector<float> yr = run(*make("reference", w, c.act), xa, c.m, c.n, c.act, pool);
    expect_close(yr, e, c.act, "reference");
  }
}

// The W4A16 backends serve W4A4 checkpoints at 16-bit activations (override / forced).
TEST_P(W4a16Backend, OnAW4A4LayerUsesUnquantizedActivations) {
  ThreadPool pool(1);
  auto layer = testing::make_layer({64, 272, {32, 32}, true, kNvfp4W4A4, 77});
  const LinearWeights w = testing::weights_of(layer);
  const std::vector<float> x = testing::make_activations(5, 272, 78);
  const std::vector<uint8_t> xa = testing::to_act(x, DType::F32);
  expect_close(run(*make(GetParam(), w, DType::F32), xa, 5, 64, DType::F32, pool),
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

TEST_P(Nvfp4Backend, ResultsIdenticalForAnyThreadCount) {
  const std::string backend = GetParam();
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t m : {1, 3, 33}) {
      SCOPED_TRACE(std::string(dtype_name(act)) + " m=" + std::to_string(m));
      auto layer = testing::make_layer({300, 272, {100, 200}, true, kNvfp4W4A4, 21});
      const LinearWeights w = testing::weights_of(layer);
      const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, 272, 22), act);
      auto kern = make(backend, w, act);
      std::vector<std::vector<uint8_t>> outs;
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<uint8_t> y(m * 300 * dtype_size(act));
        kern->forward(xa.data(), m, y.data(), pool);
        outs.push_back(std::move(y));
      }
      EXPECT_EQ(outs[0], outs[1]) << backend;
      EXPECT_EQ(outs[0], outs[2]) << backend;
    }
  }
}

// A token's result does not depend on the other tokens of the call (no batch effects): each
// token's accumulation order is the same for every tile shape and schedule (M=1 GEMV, small-M
// register tiles, large-M panels).
TEST_P(Nvfp4Backend, TokenResultsIndependentOfBatch) {
  const std::string backend = GetParam();
  ThreadPool pool(2);
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t k : {int64_t{4096}, int64_t{272}}) {
      SCOPED_TRACE(std::string(dtype_name(act)) + " k=" + std::to_string(k));
      auto layer = testing::make_layer({64, k, {64}, false, kNvfp4W4A4, 31});
      auto kern = make(backend, testing::weights_of(layer), act);
      const size_t es = dtype_size(act);
      const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(21, k, 32), act);
      std::vector<uint8_t> all(21 * 64 * es), one(64 * es), three(3 * 64 * es);
      kern->forward(xa.data(), 21, all.data(), pool);
      for (int t = 0; t < 21; ++t) {
        kern->forward(xa.data() + t * k * es, 1, one.data(), pool);
        EXPECT_EQ(0, std::memcmp(one.data(), all.data() + t * 64 * es, 64 * es)) << backend << " token " << t;
      }
      kern->forward(xa.data() + 5 * k * es, 3, three.data(), pool);
      EXPECT_EQ(0, std::memcmp(three.data(), all.data() + 5 * 64 * es, 3 * 64 * es)) << backend << " tokens 5-7";
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

TEST_P(W4a4Backend, RejectsNonFiniteActivations) {
  // One thread: a throw on a pool worker is the ThreadPool's own case (issue 10, point 1).
  {
    ThreadPool pool(1);
    auto layer = testing::make_layer({7, 48, {7}, false, kNvfp4W4A4, 51});
    auto kern = make(GetParam(), testing::weights_of(layer), DType::F32);
    std::vector<float> x(2 * 48, 0.5f), y(2 * 7);
    x[48 + 30] = NAN;
    EXPECT_THROW(kern->forward(x.data(), 2, y.data(), pool), Error);
    x[48 + 30] = INFINITY;
    EXPECT_THROW(kern->forward(x.data(), 2, y.data(), pool), Error);
  }
}

// With 2 threads token 1 is quantized on the worker thread: its error must reach the caller as the
// same clear Error (it used to abort the process), and the pool must then run a good call in full.
TEST_P(W4a4Backend, NonFiniteActivationOnAWorkerThreadIsACleanError) {
  ThreadPool pool(2);
  auto layer = testing::make_layer({7, 48, {7}, false, kNvfp4W4A4, 51});
  const LinearWeights w = testing::weights_of(layer);
  auto kern = make(GetParam(), w, DType::F32);
  std::vector<float> x(2 * 48, 0.5f), y(2 * 7);
  x[48 + 30] = NAN;
  std::string msg;
  try {
    kern->forward(x.data(), 2, y.data(), pool);
  } catch (const Error& e) {
    msg = e.what();
  }
  // (The AVX-512 backend numbers the token within the worker's chunk: column 30 is what all share.)
  EXPECT_NE(msg.find(", 30]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("is nan"), std::string::npos) << msg;
  x[48 + 30] = 0.25f;
  const std::vector<uint8_t> xa = testing::to_act(x, DType::F32);
  ThreadPool one(1);
  EXPECT_EQ(run(*kern, xa, 2, 7, DType::F32, pool), run(*kern, xa, 2, 7, DType::F32, one));
  std::vector<int> elsewhere(2, -1);
  const auto caller = std::this_thread::get_id();
  pool.parallel_for(2, [&](int64_t, int64_t, int t) { elsewhere[t] = std::this_thread::get_id() != caller; });
  EXPECT_EQ(elsewhere, (std::vector<int>{0, 1}));
}

// The W4A4 backend's activation codes are the reference quantizer's: held to the fp64 value of
// the reference-quantized operands at 1e-5·Σ|terms|, where one differing code (a step of one
// term's quantization, ~1e-3 of Σ|terms| at k = 256) would show; and perturbing one activation
// changes the result, so the codes are really used.
TEST_P(W4a4Backend, ActivationCodesMatchTheReferenceQuantizer) {
  ThreadPool pool(2);
  auto layer = testing::make_layer({48, 256, {48}, false, kNvfp4W4A4, 91});
  const LinearWeights w = testing::weights_of(layer);
  const std::vector<float> x = testing::make_activations(9, 256, 92, 3.0f);
  const Expected e = testing::expected_f64(w, x, 9, true);
  const std::vector<float> y = run(*make(GetParam(), w, DType::F32), testing::to_act(x, DType::F32), 9, 48,
                                   DType::F32, pool);
  expect_close(y, e, DType::F32, GetParam());
  // Perturbing one activation across a threshold changes the result: the codes are really used.
  std::vector<float> x2 = x;
  x2[3] = x2[3] * 1.9f + 0.5f;
  const std::vector<float> y2 = run(*make(GetParam(), w, DType::F32), testing::to_act(x2, DType::F32), 9, 48,
                                    DType::F32, pool);
  EXPECT_NE(y, y2);
}

TEST_P(W4a4Backend, A16MaxTokensRunsW4A16OnTheSameWeights) {
  const std::string backend = GetParam(), sibling = testing::w4a16_sibling(backend);
  REQUIRE_BACKEND(sibling, LayerKind::linear);
  ThreadPool pool(2);
  auto layer = testing::make_layer({64, 272, {32, 32}, true, kNvfp4W4A4, 61});
  const LinearWeights w = testing::weights_of(layer);
  auto a4 = make(backend, w, DType::BF16);
  auto a16 = make(sibling, w, DType::BF16);
  auto mixed = make(backend, w, DType::BF16, KernelOptions{4});
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

TEST_P(W4a4Backend, BadWeightsAreLoadErrors) {
  auto layer = testing::make_layer({7, 48, {3, 4}, false, kNvfp4W4A4, 71});
  LinearWeights w = testing::weights_of(layer);
  LinearProblem p{w.key, DType::F32, 7, 48, {}};
  const Backend* b = find_backend(GetParam(), LayerKind::linear);
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

// The best ISA this CPU runs: AVX-512 when every feature its backends need is there, else AVX2.
std::string best_isa() {
  if (testing::unavailable("cpu_w4a16_avx512", LayerKind::linear).empty() &&
      testing::unavailable("cpu_w4a4_avx512", LayerKind::linear).empty())
    return "avx512";
  return "avx2";
}

TEST(Nvfp4CpuKernels, OracleSelectsTheBestIsa) {
  REQUIRE_AVX2();
  const std::string isa = best_isa();
  LinearProblem p{kNvfp4W4A4, DType::BF16, 64, 272, {}};
  EXPECT_EQ(select_linear(p, "l").backend->name, "cpu_w4a4_" + isa);
  p.key = kNvfp4W4A16;
  EXPECT_EQ(select_linear(p, "l").backend->name, "cpu_w4a16_" + isa);
  p.key = kNvfp4W4A4;
  p.k = 40;  // not a multiple of 16: the CPU kernels decline with a reason
  for (const std::string& b : testing::backends_with_scheme(LayerKind::linear, kNvfp4W4A4))
    EXPECT_NE(rejection_reason(*find_backend(b, LayerKind::linear), p), "") << b;
  MoeProblem mp{kNvfp4W4A4, DType::F16, 8, 2, 64, 32, {}};
  EXPECT_EQ(select_moe(mp, "moe").backend->name, "cpu_w4a4_" + isa);
  mp.key = kNvfp4W4A16;
  EXPECT_EQ(select_moe(mp, "moe").backend->name, "cpu_w4a16_" + isa);
  const Selection s = select_moe(mp, "moe");
  EXPECT_EQ(selection_message(s, LayerKind::moe, mp.key).rfind("Using 'cpu_w4a16_" + isa + "' NVFP4 MoE backend out of potential backends: [", 0), 0u)
      << selection_message(s, LayerKind::moe, mp.key);
}

// Every registered backend either runs here or says why not, naming what the CPU lacks (or
// that the build lacks it).
TEST(Nvfp4CpuKernels, AvailabilityFollowsCpuFeatures) {
  for (const Backend* b : all_backends()) {
    const std::string why = b->unavailable_reason ? b->unavailable_reason() : "";
    if (!why.empty()) {
      EXPECT_TRUE(why.find("CPU lacks") != std::string::npos || why.find("built without") != std::string::npos ||
                  why.find("disabled by FP4LM_DISABLE_ISA") != std::string::npos)
          << b->name << ": " << why;
    }
    if (b->name.find("_avx2") != std::string::npos) {
      EXPECT_EQ(why.empty(), have_avx2()) << b->name << ": " << why;
    }
    if (b->name.find("_avx512") != std::string::npos && !cpu_features().avx512f) {
      EXPECT_NE(why.find("avx512f"), std::string::npos) << b->name << ": " << why;
    }
  }
}

}  // namespace
}  // namespace fp4lm::kernels
