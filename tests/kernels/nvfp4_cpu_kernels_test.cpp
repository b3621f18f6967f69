// The AVX2 NVFP4 backends (cpu_w4a16_avx2, cpu_w4a4_avx2) against fp64 evaluations of the same
// operands and against the `reference` backend, on odd shapes, all activation dtypes, with and
// without bias, fused shards with different global scales; thread-count determinism; the W4A4
// activation quantizer against quant::quantize_activation; --a16-max-tokens; oracle selection.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/cpu/avx2/nvfp4.h"
#include "kernels/cpu/amx_tile_permission.h"
#include "kernels/registry.h"
#include "kernel_test_support.h"

namespace fp4lm::kernels::nvfp4_cpu_kernels_test {
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
    // An odd count of whole 64-element chunks (the AVX2 loops take two per iteration), with and
    // without a partial one after it.
    {33, 192, 5, DType::BF16, false, {33}},      {9, 208, 6, DType::F32, true, {4, 5}},
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
// subnormal step; 0 for f32) + extra[i] when given (the stated bound of the int16 activations of
// the AVX2 W4A16 path). Also, without `extra`, the norm-wise relative error ||y - e|| / ||e|| <=
// 1e-5 for f32.
void expect_close(const std::vector<float>& y, const Expected& e, DType act, const std::string& what,
                  const std::vector<double>& extra = {}) {
  double err2 = 0, ref2 = 0;
  int reported = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double tol = 1e-5 * e.magnitude[i] + testing::output_rounding(act) * std::fabs(e.y[i]) +
                       (act == DType::F16 ? 0x1p-24 : 0.0) + 1e-30 + (extra.empty() ? 0.0 : extra[i]);
    const double d = std::fabs(static_cast<double>(y[i]) - e.y[i]);
    if (!(d <= tol) && reported++ < 5)
      ADD_FAILURE() << what << ": element " << i << " = " << y[i] << ", expected " << e.y[i]
                    << " (|diff| " << d << " > tol " << tol << ")";
    err2 += d * d;
    ref2 += e.y[i] * e.y[i];
  }
  if (act == DType::F32 && ref2 > 0 && extra.empty()) {
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
    const bool int16 = !w4a4 && testing::w4a16_uses_int16_activations(backend);
    expect_close(y, e, c.act, backend, int16 ? testing::int16_activation_bound(w, xr, c.m, c.act) : std::vector<double>{});
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
               testing::expected_f64(w, x, 5, false), DType::F32, "w4a16 on W4A4 layer",
               testing::w4a16_uses_int16_activations(GetParam()) ? testing::int16_activation_bound(w, x, 5, DType::F32)
                                                                 : std::vector<double>{});
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
      // Register tiles of 5-8 tokens on one decode (k = 272) or of 4 (k = 4096), and 8 + 4.
      for (int64_t mm : {6, 8, 12}) {
        std::vector<uint8_t> part(mm * 64 * es);
        kern->forward(xa.data() + 2 * k * es, mm, part.data(), pool);
        EXPECT_EQ(0, std::memcmp(part.data(), all.data() + 2 * 64 * es, part.size())) << backend << " m=" << mm;
      }
    }
  }
}

// Activations that stress a 16-bit representation: in every block values spread over 2^-40..2^0
// of the block's largest (and f32 / f16 / bf16 subnormals), zero blocks, huge blocks (~1e30),
// blocks of one nonzero value, negative maxima; M = 1..17, K not a multiple of 64. Huge blocks
// reach 2^huge_exp (float16 holds at most 65504).
std::vector<float> stress_activations(int64_t m, int64_t k, uint32_t seed, int huge_exp) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(1.0f, 2.0f);
  std::vector<float> x(static_cast<size_t>(m * k));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t b = 0; b < k / 16; ++b) {
      float* v = x.data() + t * k + b * 16;
      const int kind = static_cast<int>((t * 7 + b) % 6);
      for (int j = 0; j < 16; ++j) {
        const float sign = (rng() & 1) ? -1.0f : 1.0f;
        switch (kind) {
          case 0: v[j] = sign * mant(rng) * std::ldexp(1.0f, -static_cast<int>((j * 37 + b) % 41)); break;
          case 1: v[j] = 0.0f; break;
          case 2: v[j] = sign * mant(rng) * std::ldexp(1.0f, huge_exp - static_cast<int>(rng() % 12)); break;
          case 3: v[j] = j == 5 ? -mant(rng) : 0.0f; break;
          case 4: v[j] = sign * mant(rng) * std::ldexp(1.0f, -130 - static_cast<int>(rng() % 16)); break;  // f32 subnormal
          default: v[j] = sign * mant(rng) * std::ldexp(1.0f, -static_cast<int>(rng() % 9) - (j == 0 ? 0 : 14)); break;
        }
      }
    }
  return x;
}

// The error bound of every W4A16 backend, against fp64 of the same operands: the fp32
// accumulation term of MatchesFp64AndReference plus, for the int16 backends (AVX2), the stated
// representation bound (testing::int16_activation_bound). The test fails when it is exceeded.
TEST_P(W4a16Backend, ErrorWithinTheStatedBoundOnWideRangeBlocks) {
  const std::string backend = GetParam();
  const bool int16 = testing::w4a16_uses_int16_activations(backend);
  ThreadPool pool(2);
  uint32_t seed = 300;
  bool bound_used = false;
  for (int64_t k : {int64_t{16}, int64_t{48}, int64_t{80}, int64_t{272}, int64_t{1040}}) {
    for (int64_t m = 1; m <= 17; m += (k == 1040 ? 4 : 1)) {
      for (DType act : {DType::F32, DType::BF16, DType::F16}) {
        SCOPED_TRACE(backend + " k=" + std::to_string(k) + " m=" + std::to_string(m) + " " + std::string(dtype_name(act)));
        auto layer = testing::make_layer({19, k, {11, 8}, m % 2 == 0, kNvfp4W4A16, seed++});
        const LinearWeights w = testing::weights_of(layer);
        const std::vector<uint8_t> xa = testing::to_act(stress_activations(m, k, seed++, act == DType::F16 ? 8 : 99), act);
        const std::vector<float> xr = testing::from_act(xa.data(), act, static_cast<size_t>(m * k));
        const Expected e = testing::expected_f64(w, xr, m, false);
        const std::vector<float> y = run(*make(backend, w, act), xa, m, 19, act, pool);
        const std::vector<double> extra = int16 ? testing::int16_activation_bound(w, xr, m, act) : std::vector<double>{};
        expect_close(y, e, act, backend, extra);
        if (int16 && act == DType::BF16) {  // the wide-range blocks really exceed the accumulation term alone
          for (size_t i = 0; i < y.size(); ++i)
            bound_used = bound_used || std::fabs(y[i] - e.y[i]) > 1e-5 * e.magnitude[i] + testing::output_rounding(act) * std::fabs(e.y[i]) + 1e-30;
        }
      }
    }
  }
  if (int16) {
    EXPECT_TRUE(bound_used) << "the stress activations never needed the representation bound";
  }
}

// Activations that bfloat16 holds exactly, within 2^7 of their block's largest |x| (or zero),
// are exactly int16 × 2^e: then every W4A16 backend is held to the accumulation term alone.
// Passed as float32 so that no output rounding hides an error.
TEST_P(W4a16Backend, Bf16WithinTwoToTheSevenOfTheBlockMaxIsExact) {
  const std::string backend = GetParam();
  ThreadPool pool(1);
  std::mt19937 rng(5);
  for (int64_t k : {int64_t{64}, int64_t{272}, int64_t{4096}}) {
    const int64_t m = 5;
    auto layer = testing::make_layer({33, k, {33}, false, kNvfp4W4A16, 9});
    const LinearWeights w = testing::weights_of(layer);
    std::vector<float> x(static_cast<size_t>(m * k));
    for (int64_t b = 0; b < m * k / 16; ++b) {
      // Element 3 is the block's largest, 2^(top + 1); the others are exact bf16 values with
      // exponents top - 6 .. top (within 2^7 of it), or zero (element 9).
      const int top = static_cast<int>(rng() % 60) - 30;
      for (int j = 0; j < 16; ++j) {
        const float mant = static_cast<float>(128 + rng() % 128) / 128.0f;
        const float v = j == 3 ? std::ldexp(1.0f, top + 1) : j == 9 ? 0.0f : mant * std::ldexp(1.0f, top - static_cast<int>(rng() % 7));
        x[b * 16 + j] = (rng() & 1) ? -v : v;
      }
    }
    const std::vector<uint8_t> xa = testing::to_act(x, DType::F32);
    ASSERT_EQ(testing::from_act(testing::to_act(x, DType::BF16).data(), DType::BF16, x.size()), x);
    SCOPED_TRACE(backend + " k=" + std::to_string(k));
    expect_close(run(*make(backend, w, DType::F32), xa, m, 33, DType::F32, pool), testing::expected_f64(w, x, m, false),
                 DType::F32, backend);
  }
}

// NaN / ±inf activations (W4A16 never rejects them): every output of the poisoned token is
// non-finite, the other tokens of the call are what they are without it.
TEST_P(W4a16Backend, NonFiniteActivationPoisonsOnlyItsToken) {
  const std::string backend = GetParam();
  ThreadPool pool(2);
  auto layer = testing::make_layer({40, 272, {40}, true, kNvfp4W4A16, 15});
  const LinearWeights w = testing::weights_of(layer);
  for (DType act : {DType::F32, DType::BF16, DType::F16}) {
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      SCOPED_TRACE(std::string(dtype_name(act)) + " " + std::to_string(bad));
      std::vector<float> x = testing::make_activations(6, 272, 16);
      const std::vector<float> clean = testing::run(*make(backend, w, act), testing::to_act(x, act), 6, 40, act, pool);
      x[2 * 272 + 100] = bad;
      const std::vector<float> y = testing::run(*make(backend, w, act), testing::to_act(x, act), 6, 40, act, pool);
      for (int64_t t = 0; t < 6; ++t)
        for (int64_t r = 0; r < 40; ++r) {
          const float v = y[t * 40 + r];
          if (t == 2)
            EXPECT_FALSE(std::isfinite(v)) << "row " << r;
          else
            EXPECT_EQ(v, clean[t * 40 + r]) << "token " << t << " row " << r;
        }
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

// The backend the oracle should pick for a scheme on this CPU: the first of its GEMM variant, its
// AVX-512 kernel and its AVX2 kernel that runs here. Per scheme, since the two need different
// AVX-512 extensions (W4A4: VBMI + VNNI; W4A16: neither).
std::string best_backend(const std::string& scheme) {
  for (const std::string& name : {"cpu_" + scheme + "_avx512_gemm", "cpu_" + scheme + "_avx512"})
    if (testing::unavailable(name, LayerKind::linear).empty()) return name;
  return "cpu_" + scheme + "_avx2";
}

TEST(Nvfp4CpuKernels, OracleSelectsTheBestIsa) {
  REQUIRE_AVX2();
  LinearProblem p{kNvfp4W4A4, DType::BF16, 64, 272, {}};
  const std::string w4a4 = best_backend("w4a4");
  EXPECT_EQ(select_linear(p, "l").backend->name, w4a4);
  p.key = kNvfp4W4A16;
  const std::string w4a16 = best_backend("w4a16");
  EXPECT_EQ(select_linear(p, "l").backend->name, w4a16);
  p.key = kNvfp4W4A4;
  p.k = 40;  // not a multiple of 16: the CPU kernels decline with a reason
  for (const std::string& b : testing::backends_with_scheme(LayerKind::linear, kNvfp4W4A4))
    EXPECT_NE(rejection_reason(*find_backend(b, LayerKind::linear), p), "") << b;
  MoeProblem mp{kNvfp4W4A4, DType::F16, 8, 2, 64, 32, {}};
  EXPECT_EQ(select_moe(mp, "moe").backend->name, w4a4);
  mp.key = kNvfp4W4A16;
  EXPECT_EQ(select_moe(mp, "moe").backend->name, w4a16);
  const Selection s = select_moe(mp, "moe");
  EXPECT_EQ(selection_message(s, LayerKind::moe, mp.key).rfind("Using '" + w4a16 + "' NVFP4 MoE backend out of potential backends: [", 0), 0u)
      << selection_message(s, LayerKind::moe, mp.key);
}

// Every registered backend either runs here or says why not, by the one ISA decision on what it
// declares (kernels/isa.h): the CPU features it lists, its instruction set's build, the override.
TEST(Nvfp4CpuKernels, AvailabilityFollowsCpuFeatures) {
  for (const Backend* b : all_backends()) {
    const std::string why = b->unavailable_reason ? b->unavailable_reason() : "";
    // The AMX backends also need Linux's permission for the tile state, asked after the ISA check.
    const std::string isa_why = isa_unavailable_reason(b->isa);
    EXPECT_EQ(why, b->isa.isa == Isa::amx && isa_why.empty() ? cpu::amx_tile_permission_reason() : isa_why) << b->name;
    if (b->isa.isa == Isa::amx && isa_why.empty() && !why.empty()) continue;
    const bool cpu_has = cpu_features().features.contains(b->isa.cpu);
    if (disabled_isa() || !isa_built(b->isa.isa)) continue;
    EXPECT_EQ(why.empty(), cpu_has) << b->name << ": " << why;
    if (!cpu_has) {
      EXPECT_NE(why.find("CPU lacks " + b->isa.cpu.minus(cpu_features().features).names()), std::string::npos)
          << b->name << ": " << why;
    }
  }
}

}  // namespace
}  // namespace fp4lm::kernels::nvfp4_cpu_kernels_test
