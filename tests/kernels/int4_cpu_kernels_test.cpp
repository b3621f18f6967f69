// Every registered int4 W4A16 CPU backend (cpu_int4_w4a16_avx2, cpu_int4_w4a16_avx512) and the
// `reference` backend against an fp64 GEMM of the dequantized weights, decoded here from the
// definition: w[r, perm[j]] = (code[r, j] - zero[r, j / group]) × scale[r, j / group]. Symmetric
// (zero 8) and asymmetric, group sizes 32 / 64 / 128 and per-channel, act-order permutations,
// fused shards (each with its own act-order permutation), bias, every activation dtype; the panel schedule bit-identical to the register
// one, thread-count and batch invariance; load errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>

#include "common/error_of.h"
#include "kernel_test_support.h"

namespace fp4lm::kernels::int4_cpu_kernels_test {
namespace {

using testing::Expected;

struct Int4Spec {
  int64_t n = 0, k = 0, group = 0;  // group 0: per channel (group = k)
  std::vector<int64_t> shard_rows;
  bool symmetric = true, act_order = false, bias = false;
  uint32_t seed = 1;
};

struct Int4Layer {
  LinearWeights weights;
};

LinearWeights make_int4_layer(const Int4Spec& s) {
  std::mt19937 rng(s.seed);
  std::uniform_int_distribution<int> nib(0, 15);
  std::uniform_real_distribution<float> uni(-2.0f, 2.0f);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t group = s.group == 0 ? s.k : s.group, groups = s.k / group;
  LinearWeights w;
  w.key = kInt4W4A16;
  w.n = s.n;
  w.k = s.k;
  for (size_t i = 0; i < s.shard_rows.size(); ++i) {
    const int64_t rows = s.shard_rows[i];
    Int4View v;
    v.group = group;
    if (s.act_order) {  // each shard its own order (GPTQ orders each module by its own Hessian)
      v.perm.resize(static_cast<size_t>(s.k));
      std::iota(v.perm.begin(), v.perm.end(), 0);
      std::shuffle(v.perm.begin(), v.perm.end(), rng);
    }
    for (int64_t b = 0; b < rows * s.k / 2; ++b) v.codes.push_back(static_cast<uint8_t>(nib(rng) | nib(rng) << 4));
    for (int64_t g = 0; g < rows * groups; ++g) {
      v.scales.push_back(0.01f * std::exp2(uni(rng) + static_cast<float>(i)) * (g % 7 == 3 ? -1.0f : 1.0f));
      v.zeros.push_back(static_cast<uint8_t>(s.symmetric ? 8 : nib(rng)));
    }
    w.shards.push_back({"test.int4.shard" + std::to_string(i), rows, std::move(v)});
  }
  if (s.bias)
    for (int64_t r = 0; r < s.n; ++r) w.bias.push_back(normal(rng));
  return w;
}

// The dequantized weights in fp64, from the definition.
std::vector<std::vector<double>> dequantized_f64(const LinearWeights& w) {
  std::vector<std::vector<double>> rows;
  for (const WeightShard& sh : w.shards) {
    const Int4View& v = sh.as<Int4View>();
    const int64_t groups = w.k / v.group;
    for (int64_t r = 0; r < sh.rows; ++r) {
      std::vector<double>& row = rows.emplace_back(static_cast<size_t>(w.k));
      for (int64_t j = 0; j < w.k; ++j) {
        const uint8_t byte = v.codes[static_cast<size_t>(r * (w.k / 2) + j / 2)];
        const int code = j % 2 == 0 ? byte & 15 : byte >> 4;
        const size_t g = static_cast<size_t>(r * groups + j / v.group);
        const int64_t col = v.perm.empty() ? j : v.perm[static_cast<size_t>(j)];
        row[static_cast<size_t>(col)] = (code - static_cast<double>(v.zeros[g])) * static_cast<double>(v.scales[g]);
      }
    }
  }
  return rows;
}

Expected expected_f64(const LinearWeights& w, const std::vector<float>& x, int64_t m) {
  const std::vector<std::vector<double>> rows = dequantized_f64(w);
  return testing::linear_f64(w, std::vector<double>(x.begin(), x.end()), m, [&](int64_t r) { return rows[r]; });
}

std::vector<std::string> int4_backends() { return testing::runnable_backends_with_scheme(LayerKind::linear, kInt4W4A16); }

TEST(Int4CpuKernels, TheAvxBackendsAreRegistered) {
  const std::vector<std::string> all = testing::backends_with_scheme(LayerKind::linear, kInt4W4A16);
  EXPECT_NE(std::find(all.begin(), all.end(), "cpu_int4_w4a16_avx2"), all.end());
  EXPECT_NE(std::find(all.begin(), all.end(), "cpu_int4_w4a16_avx512"), all.end());
  if (!testing::have_avx2()) GTEST_SKIP() << "no AVX2 here: only `reference` runs int4";
}

struct Case {
  int64_t n, k, group, m;
  DType act;
  bool symmetric, act_order, bias;
  std::vector<int64_t> shards;
};

const std::vector<Case> kCases = {
    {1, 32, 32, 1, DType::F32, true, false, false, {1}},
    {7, 64, 32, 2, DType::BF16, false, false, true, {3, 4}},
    {64, 128, 64, 3, DType::F16, true, true, false, {16, 16, 32}},
    {300, 4096, 128, 1, DType::BF16, false, true, true, {100, 150, 50}},
    {33, 256, 0, 5, DType::F32, false, false, false, {33}},       // per channel
    {65, 384, 128, 9, DType::BF16, true, true, true, {64, 1}},    // panel schedule
    {24, 4096, 128, 8, DType::F16, false, false, false, {24}},
    {130, 512, 32, 33, DType::F32, false, true, true, {64, 66}},
    {40, 256, 16, 2, DType::BF16, false, false, false, {40}},   // 8 groups per 128-column chunk
    {48, 384, 64, 9, DType::F32, false, true, false, {16, 32}},  // group 64, panel schedule
    // The repacked layout (int4_packed.h): rows padded to 256 (AVX-512) / 64 (AVX2) columns,
    // lanes of several groups per chunk, groups that straddle chunks, both schedules.
    {5, 96, 32, 1, DType::BF16, false, true, false, {5}},          // k < one chunk of either ISA
    {9, 320, 64, 2, DType::F16, true, false, true, {4, 5}},        // tails of 64 / 256 columns
    {17, 288, 96, 3, DType::BF16, false, true, false, {17}},       // AVX2: a chunk's halves in two groups
    {11, 288, 48, 8, DType::F32, false, false, true, {11}},        // group 48: AVX2 runs the Int4Rows kernel
    {6, 640, 128, 4, DType::BF16, false, true, false, {3, 3}},     // 2.5 super-chunks
    {10, 768, 256, 1, DType::F16, false, false, false, {10}},      // one group per super-chunk
    {20, 1024, 64, 16, DType::BF16, false, true, true, {20}},      // AVX-512 panel schedule, asymmetric
    {26, 512, 128, 17, DType::F32, true, false, false, {26}},      // panel schedule, symmetric, 3 pieces
    {3, 4096, 0, 2, DType::BF16, true, true, false, {3}},          // per channel, act-order
};

TEST(Int4CpuKernels, EveryBackendMatchesFp64OfDequantizedWeights) {
  ThreadPool pool(2);
  uint32_t seed = 100;
  for (const std::string& backend : int4_backends())
    for (const Case& c : kCases) {
      SCOPED_TRACE(backend + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " group=" +
                   std::to_string(c.group) + " m=" + std::to_string(c.m) + " act=" + std::string(dtype_name(c.act)) +
                   (c.symmetric ? " sym" : " asym") + (c.act_order ? " act-order" : ""));
      const LinearWeights w = make_int4_layer({c.n, c.k, c.group, c.shards, c.symmetric, c.act_order, c.bias, seed++});
      const std::vector<float> x = testing::make_activations(c.m, c.k, seed++);
      const std::vector<uint8_t> xa = testing::to_act(x, c.act);
      const std::vector<float> xr = testing::from_act(xa.data(), c.act, x.size());
      auto kern = testing::make(backend, w, c.act);
      testing::expect_within_f64_bound(testing::run(*kern, xa, c.m, c.n, c.act, pool), expected_f64(w, xr, c.m),
                                       c.act, backend, 1e-5);
    }
}

// Tokens of a large call (panel schedule) equal themselves computed alone (register schedule),
// bit for bit, at any thread count.
TEST(Int4CpuKernels, PanelScheduleIsBitIdenticalToTheRegisterScheduleAndBatchInvariant) {
  ThreadPool one(1), three(3);
  for (const std::string& backend : int4_backends()) {
    if (backend == "reference") continue;
    SCOPED_TRACE(backend);
    for (int64_t group : {128, 32}) {
      const LinearWeights w = make_int4_layer({150, 512, group, {70, 80}, false, true, true, 7});
      for (int64_t m : {5, 11, 40}) {
        const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, 512, 8), DType::BF16);
        auto kern = testing::make(backend, w, DType::BF16);
        const std::vector<float> y1 = testing::run(*kern, xa, m, 150, DType::BF16, one);
        const std::vector<float> y3 = testing::run(*kern, xa, m, 150, DType::BF16, three);
        ASSERT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)));
        for (int64_t t = 0; t < m; ++t) {
          std::vector<uint8_t> xt(xa.begin() + t * 512 * 2, xa.begin() + (t + 1) * 512 * 2);
          const std::vector<float> yt = testing::run(*kern, xt, 1, 150, DType::BF16, three);
          ASSERT_EQ(0, std::memcmp(yt.data(), y1.data() + t * 150, 150 * sizeof(float))) << "m " << m << " token " << t;
        }
      }
    }
  }
}

TEST(Int4CpuKernels, BadWeightsAreLoadErrors) {
  for (const std::string& backend : int4_backends()) {
    SCOPED_TRACE(backend);
    auto err = [&](const LinearWeights& w) { return test::error_of([&] { testing::make(backend, w, DType::BF16); }); };
    LinearWeights w = make_int4_layer({8, 64, 32, {8}, false, true, false, 3});
    w.shards[0].as<Int4View>().zeros[5] = 17;
    EXPECT_NE(err(w).find("test.int4.shard0: int4 zero point [5] is 17, expected 0..16"), std::string::npos) << err(w);
    w = make_int4_layer({8, 64, 32, {8}, false, true, false, 3});
    w.shards[0].as<Int4View>().perm[3] = w.shards[0].as<Int4View>().perm[4];
    EXPECT_NE(err(w).find("act-order permutation is not a permutation of [0, 64)"), std::string::npos) << err(w);
    w = make_int4_layer({8, 64, 32, {8}, false, false, false, 3});
    w.shards[0].as<Int4View>().group = 48;
    EXPECT_NE(err(w).find("int4 group size 48 does not divide the input width 64"), std::string::npos) << err(w);
    w = make_int4_layer({8, 64, 32, {8}, false, false, false, 3});
    w.shards[0].as<Int4View>().scales.pop_back();
    EXPECT_NE(err(w).find("expected 256, 16, 16"), std::string::npos) << err(w);
  }
}

// Zero points at both ends of their range (0 and 16: code - zero from -16 to 15, the AVX2
// kernel's int32 sums at their 2^30 bound) and activations with a wide range within each block.
TEST(Int4CpuKernels, ExtremeZeroPointsMatchFp64) {
  ThreadPool pool(2);
  for (const std::string& backend : int4_backends())
    for (int64_t group : {32, 128}) {
      SCOPED_TRACE(backend + " group " + std::to_string(group));
      LinearWeights w = make_int4_layer({13, 512, group, {13}, false, false, false, 21});
      std::vector<uint8_t>& z = w.shards[0].as<Int4View>().zeros;
      for (size_t i = 0; i < z.size(); ++i) z[i] = i % 3 == 0 ? 0 : i % 3 == 1 ? 16 : 8;
      std::vector<uint8_t>& codes = w.shards[0].as<Int4View>().codes;
      for (size_t i = 0; i < codes.size(); i += 5) codes[i] = i % 2 ? 0x00 : 0xFF;
      std::vector<float> x = testing::make_activations(3, 512, 22);
      for (size_t j = 0; j < x.size(); j += 7) x[j] *= 1e-4f;
      for (DType act : {DType::BF16, DType::F32}) {
        const std::vector<uint8_t> xa = testing::to_act(x, act);
        const std::vector<float> xr = testing::from_act(xa.data(), act, x.size());
        auto kern = testing::make(backend, w, act);
        testing::expect_within_f64_bound(testing::run(*kern, xa, 3, 13, act, pool), expected_f64(w, xr, 3), act,
                                         backend, 1e-5);
      }
    }
}

// The repacked layout is what runs where it applies: its bytes (codes padded to whole chunks,
// fp32 scales and zero-point bytes with 16 spare, AVX-512 without the zero points when symmetric);
// AVX2 keeps the Int4Rows layout (fp32 scales and zeros) for group 48.
TEST(Int4CpuKernels, TheRepackedLayoutIsTheOneThatRuns) {
  struct Want {
    std::string backend;
    int64_t k, group;
    bool symmetric;
    size_t bytes;
  };
  const int64_t n = 4;
  const std::vector<Want> wants = {
      {"cpu_int4_w4a16_avx512", 320, 64, true, n * 512 / 2 + (n * 5 + 16) * 4},
      {"cpu_int4_w4a16_avx512", 320, 64, false, n * 512 / 2 + (n * 5 + 16) * 5},
      {"cpu_int4_w4a16_avx512", 288, 48, false, n * 512 / 2 + (n * 6 + 16) * 5},
      {"cpu_int4_w4a16_avx2", 320, 64, false, n * 320 / 2 + (n * 5 + 16) * 5},
      {"cpu_int4_w4a16_avx2", 288, 96, true, n * 320 / 2 + (n * 3 + 16) * 5},
      {"cpu_int4_w4a16_avx2", 288, 48, false, n * 288 / 2 + n * 6 * 8},
  };
  for (const Want& want : wants) {
    if (!testing::unavailable(want.backend, LayerKind::linear).empty()) continue;
    SCOPED_TRACE(want.backend + " k " + std::to_string(want.k) + " group " + std::to_string(want.group));
    const LinearWeights w = make_int4_layer({n, want.k, want.group, {n}, want.symmetric, true, false, 9});
    EXPECT_EQ(testing::make(want.backend, w, DType::BF16)->weight_bytes(), want.bytes);
  }
}

TEST(Int4CpuKernels, AGroupSizeTheKernelsCannotDecodeIsRefusedByThemAndRunByReference) {
  ThreadPool pool(1);
  const LinearWeights w = make_int4_layer({4, 64, 8, {4}, false, false, false, 5});
  for (const std::string& backend : int4_backends()) {
    const std::vector<float> x = testing::make_activations(2, 64, 6);
    const std::vector<uint8_t> xa = testing::to_act(x, DType::F32);
    if (backend == "reference") {
      auto kern = testing::make(backend, w, DType::F32);
      testing::expect_within_f64_bound(testing::run(*kern, xa, 2, 4, DType::F32, pool), expected_f64(w, x, 2),
                                       DType::F32, backend, 1e-5);
    } else {
      const std::string e = test::error_of([&] { testing::make(backend, w, DType::F32); });
      EXPECT_NE(e.find("has group size 8; the kernels need a multiple of 16"), std::string::npos) << e;
    }
  }
}

}  // namespace
}  // namespace fp4lm::kernels::int4_cpu_kernels_test
