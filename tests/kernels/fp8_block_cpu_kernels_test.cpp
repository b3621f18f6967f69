// Block-wise FP8 (DeepSeek / Qwen `weight_block_size`, compressed-tensors FP8_BLOCK) on every
// registered backend that runs it (the FP8 W8A16 backends, reference): against fp64 of the exactly
// decoded weights (code × its block's scale), for block sizes that do and do not divide the
// shapes, fused shards with their own grids, every activation dtype, the register and the panel
// schedules; thread-count and batch invariance; bit-identity with per-tensor FP8 where a uniform
// power-of-two grid makes the two the same numbers; reference's W8A8 per-token-group
// activation rule by hand; the grouped MoE; load errors; the oracle.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include "common/error_of.h"
#include "kernels/cpu/fp8_matrix.h"
#include "kernels/cpu/reference/math.h"
#include "kernels/registry.h"
#include "kernel_test_support.h"

namespace fp4lm::kernels::fp8_block_cpu_kernels_test {
namespace {

using testing::Expected;

struct BlockLayer {
  std::vector<std::vector<uint8_t>> codes;  // per shard [rows, k]
  LinearWeights weights;
};

struct BlockSpec {
  int64_t n = 0, k = 0;
  std::vector<int64_t> shard_rows;
  int64_t bn = 128, bk = 128;
  bool bias = false;
  QuantKey key = kFp8BlockW8A16;
  uint32_t seed = 1;
  float uniform_scale = 0.0f;  // > 0: every block scale is this value
};

// Random weights quantized per block (scale = block amax / 448, as DeepSeek's quantizer), row 0
// of each shard cycling through every non-NaN code.
std::shared_ptr<BlockLayer> make_block_layer(const BlockSpec& s) {
  auto layer = std::make_shared<BlockLayer>();
  std::mt19937 rng(s.seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(-3.0f, 3.0f);
  LinearWeights& w = layer->weights;
  w.key = s.key;
  w.n = s.n;
  w.k = s.k;
  const int64_t cols = (s.k + s.bk - 1) / s.bk;
  for (size_t i = 0; i < s.shard_rows.size(); ++i) {
    const int64_t rows = s.shard_rows[i], grid_rows = (rows + s.bn - 1) / s.bn;
    std::vector<float> data(static_cast<size_t>(rows * s.k));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < s.k; ++j)  // magnitudes vary by block, so the grid matters
        data[r * s.k + j] = normal(rng) * 0.02f * std::exp2(static_cast<float>((r / s.bn + 2 * (j / s.bk)) % 5) - 2);
    Fp8BlockView v;
    v.block_n = s.bn;
    v.block_k = s.bk;
    v.scale_cols = cols;
    v.scales.assign(static_cast<size_t>(grid_rows * cols), 0.0f);
    for (int64_t g = 0; g < grid_rows; ++g)
      for (int64_t c = 0; c < cols; ++c) {
        float amax = 0;
        for (int64_t r = g * s.bn; r < std::min(rows, (g + 1) * s.bn); ++r)
          for (int64_t j = c * s.bk; j < std::min(s.k, (c + 1) * s.bk); ++j) amax = std::max(amax, std::fabs(data[r * s.k + j]));
        v.scales[g * cols + c] = s.uniform_scale > 0 ? s.uniform_scale : amax > 0 ? amax / 448.0f * std::exp2(uni(rng) / 8) : 1.0f;
      }
    std::vector<uint8_t> codes(static_cast<size_t>(rows * s.k));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < s.k; ++j)
        codes[r * s.k + j] = f32_to_e4m3(data[r * s.k + j] / v.scales[(r / s.bn) * cols + j / s.bk]);
    int code = 0;
    for (int64_t j = 0; j < s.k; ++j) {
      if ((code & 0x7f) == 0x7f) ++code;
      codes[j] = static_cast<uint8_t>(code);
      code = (code + 1) & 0xff;
    }
    layer->codes.push_back(std::move(codes));
    WeightShard sh;
    sh.name = "test.fp8block.shard" + std::to_string(i);
    sh.rows = rows;
    sh.view = v;
    w.shards.push_back(sh);
  }
  for (size_t i = 0; i < w.shards.size(); ++i) w.shards[i].as<Fp8BlockView>().codes = layer->codes[i].data();
  if (s.bias)
    for (int64_t r = 0; r < s.n; ++r) w.bias.push_back(normal(rng));
  return layer;
}

LinearWeights weights_of(const std::shared_ptr<BlockLayer>& l) {
  LinearWeights w = l->weights;
  w.keepalive = l;
  return w;
}

// Row r decoded exactly: e4m3(code) × its block's scale, in fp64 (independent of reference/math).
std::vector<double> block_row_f64(const LinearWeights& w, int64_t r) {
  for (const WeightShard& s : w.shards) {
    if (r >= s.rows) {
      r -= s.rows;
      continue;
    }
    const Fp8BlockView& v = s.as<Fp8BlockView>();
    std::vector<double> row(static_cast<size_t>(w.k));
    for (int64_t j = 0; j < w.k; ++j)
      row[j] = static_cast<double>(e4m3_to_f32(v.codes[r * w.k + j])) *
               static_cast<double>(v.scales[(r / v.block_n) * v.scale_cols + j / v.block_k]);
    return row;
  }
  ADD_FAILURE() << "row past the layer";
  return {};
}

Expected expected_f64(const LinearWeights& w, const std::vector<float>& x, int64_t m) {
  return testing::linear_f64(w, std::vector<double>(x.begin(), x.end()), m,
                             [&](int64_t r) { return block_row_f64(w, r); });
}

// fp32 sums with x × scale rounded once to fp32 per block: twice the per-tensor bound.
void expect_close(const std::vector<float>& y, const Expected& e, DType act, const std::string& what) {
  testing::expect_within_f64_bound(y, e, act, what, 2e-5);
}

// The registered backends this CPU can run (every ISA's, from the registry), plus reference.
std::vector<std::string> block_backends() {
  return testing::runnable_backends_with_scheme(LayerKind::linear, kFp8BlockW8A16);
}

TEST(Fp8BlockCpuKernels, TheFp8W8A16BackendsAndReferenceRunBlockFp8) {
  const std::vector<std::string> fast = testing::backends_with_scheme(LayerKind::linear, kFp8BlockW8A16);
  EXPECT_EQ(fast, testing::backends_with_scheme(LayerKind::linear, kFp8W8A16));
  if (testing::have_avx2()) {
    EXPECT_FALSE(fast.empty());
  }
  EXPECT_TRUE(find_backend("reference", LayerKind::linear)->supports(kFp8Block));
}

TEST(Fp8BlockCpuKernels, EveryBackendMatchesFp64OfDecodedWeights) {
  struct Case {
    int64_t n, k, m, bn, bk;
    DType act;
    bool bias;
    std::vector<int64_t> shards;
  };
  const std::vector<Case> cases = {
      {1, 1, 1, 128, 128, DType::F32, false, {1}},
      {300, 272, 1, 128, 128, DType::BF16, true, {128, 100, 72}},  // partial last row and column blocks
      {256, 384, 3, 128, 128, DType::F16, false, {256}},
      {70, 100, 5, 16, 32, DType::BF16, true, {40, 30}},  // small blocks: many runs per unit of work
      {45, 77, 40, 8, 24, DType::BF16, false, {20, 25}},  // 40 tokens: the panel schedule
  };
  ThreadPool pool(2);
  uint32_t seed = 11;
  for (const std::string& backend : block_backends())
    for (const Case& c : cases) {
      SCOPED_TRACE(backend + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " m=" + std::to_string(c.m) +
                   " block " + std::to_string(c.bn) + "x" + std::to_string(c.bk) + " act=" + std::string(dtype_name(c.act)));
      auto layer = make_block_layer({c.n, c.k, c.shards, c.bn, c.bk, c.bias, kFp8BlockW8A16, seed++});
      const LinearWeights w = weights_of(layer);
      const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(c.m, c.k, seed++), c.act);
      const std::vector<float> xr = testing::from_act(xa.data(), c.act, static_cast<size_t>(c.m * c.k));
      auto kern = testing::make(backend, w, c.act);
      expect_close(testing::run(*kern, xa, c.m, c.n, c.act, pool), expected_f64(w, xr, c.m), c.act, backend);
    }
}

// The AVX-512 kernels take x' = x · s in as few bf16 pieces as hold it exactly (bf16 x with
// power-of-two scales 1, with bf16-exact scales 2, else 3): every kind of grid, every activation
// dtype, register and panel schedules, still within the fp64 bound (one piece too few would be
// off by ~2^-9 relative).
TEST(Fp8BlockCpuKernels, ScaleGridsOfEveryPrecisionStayExact) {
  EXPECT_EQ(cpu::significant_bits(0x1p-7f), 1);
  EXPECT_EQ(cpu::significant_bits(1.5f), 2);
  EXPECT_EQ(cpu::significant_bits(bf16_to_f32(0x3E9B)), 8);  // 7 mantissa bits, the last one set
  EXPECT_EQ(cpu::significant_bits(std::bit_cast<float>(0x3E99999Bu)), 24);
  EXPECT_EQ(cpu::significant_bits(0.3f), 23);  // 0x3E99999A
  EXPECT_EQ(cpu::fp8_block_pieces(DType::BF16, 1), 1);
  EXPECT_EQ(cpu::fp8_block_pieces(DType::BF16, 8), 2);
  EXPECT_EQ(cpu::fp8_block_pieces(DType::BF16, 9), 3);
  EXPECT_EQ(cpu::fp8_block_pieces(DType::F16, 1), 2);
  EXPECT_EQ(cpu::fp8_block_pieces(DType::F16, 5), 2);
  EXPECT_EQ(cpu::fp8_block_pieces(DType::F16, 8), 3);
  EXPECT_EQ(cpu::fp8_block_pieces(DType::F32, 1), 3);
  ThreadPool pool(2);
  const auto round_to = [](const char* kind, float v) {
    if (std::string(kind) == "pow2") return std::exp2(std::round(std::log2(v)));
    if (std::string(kind) == "bf16") return bf16_to_f32(f32_to_bf16(v));
    if (std::string(kind) == "f16") return f16_to_f32(f32_to_f16(v));
    return v;
  };
  for (const std::string& backend : block_backends())
    for (const char* kind : {"pow2", "bf16", "f16", "f32"})
      for (DType act : {DType::BF16, DType::F16, DType::F32})
        for (int64_t m : {int64_t{3}, int64_t{40}}) {
          SCOPED_TRACE(backend + " scales " + kind + " act " + std::string(dtype_name(act)) + " m=" + std::to_string(m));
          auto layer = make_block_layer({96, 200, {64, 32}, 32, 64, false, kFp8BlockW8A16, 31});
          for (WeightShard& sh : layer->weights.shards)
            for (float& v : sh.as<Fp8BlockView>().scales) v = round_to(kind, v * 1.37f);
          const LinearWeights w = weights_of(layer);
          const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, 200, 32), act);
          const std::vector<float> xr = testing::from_act(xa.data(), act, static_cast<size_t>(m * 200));
          auto kern = testing::make(backend, w, act);
          expect_close(testing::run(*kern, xa, m, 96, act, pool), expected_f64(w, xr, m), act, backend);
        }
}

TEST(Fp8BlockCpuKernels, ResultsIdenticalForAnyThreadCountAndBatch) {
  ThreadPool one(1), two(2), three(3);
  for (const std::string& backend : block_backends()) {
    if (backend == "reference") continue;
    for (int64_t m : {int64_t{11}, int64_t{37}}) {  // register and panel schedules
      SCOPED_TRACE(backend + " m=" + std::to_string(m));
      auto layer = make_block_layer({300, 272, {100, 200}, 64, 128, true, kFp8BlockW8A16, 7});
      const LinearWeights w = weights_of(layer);
      const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, 272, 8), DType::BF16);
      auto kern = testing::make(backend, w, DType::BF16);
      const std::vector<float> y1 = testing::run(*kern, xa, m, 300, DType::BF16, one);
      for (ThreadPool* p : {&two, &three}) {
        const std::vector<float> yp = testing::run(*kern, xa, m, 300, DType::BF16, *p);
        ASSERT_EQ(0, std::memcmp(y1.data(), yp.data(), y1.size() * sizeof(float)));
      }
      for (int64_t t = 0; t < m; t += 3) {
        std::vector<uint8_t> xt(xa.begin() + t * 272 * 2, xa.begin() + (t + 1) * 272 * 2);
        const std::vector<float> yt = testing::run(*kern, xt, 1, 300, DType::BF16, two);
        ASSERT_EQ(0, std::memcmp(yt.data(), y1.data() + t * 300, 300 * sizeof(float))) << "token " << t;
      }
    }
  }
}

// A grid whose every scale is 2^-7 holds the numbers of a per-tensor FP8 layer with weight_scale
// 2^-7; scaling x by a power of two is exact, so the two must agree bit for bit.
TEST(Fp8BlockCpuKernels, UniformPowerOfTwoGridIsBitIdenticalToPerTensorFp8) {
  ThreadPool pool(2);
  for (const std::string& backend : block_backends()) {
    if (backend == "reference") continue;
    for (DType act : {DType::BF16, DType::F32}) {
      SCOPED_TRACE(backend + " " + std::string(dtype_name(act)));
      auto layer = make_block_layer({200, 320, {150, 50}, 128, 128, true, kFp8BlockW8A16, 21, 0x1p-7f});
      const LinearWeights bw = weights_of(layer);
      LinearWeights pw = bw;
      pw.key = kFp8W8A16;
      for (WeightShard& s : pw.shards) {
        Fp8View v;
        v.codes = s.as<Fp8BlockView>().codes;
        v.global_scale = 0x1p-7f;
        s.view = v;
      }
      const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(5, 320, 3), act);
      const std::vector<float> yb = testing::run(*testing::make(backend, bw, act), xa, 5, 200, act, pool);
      const std::vector<float> yp = testing::run(*testing::make(backend, pw, act), xa, 5, 200, act, pool);
      ASSERT_EQ(0, std::memcmp(yb.data(), yp.data(), yb.size() * sizeof(float)));
    }
  }
}

// vLLM's per_token_group_quant_fp8: s = max(amax, 1e-10) / 448 per token per group, q =
// e4m3(x / s). Worked by hand: group {3, -1, 0.1, 2.9} has s = 3/448, so 3 -> 448 (exact),
// -1 -> -149.33 -> -144 (E4M3 step 16 in [128, 256): -149.33 is nearer -144 than -152), 0.1 ->
// 14.93 -> 15 (step 1 in [8, 16)), 2.9 -> 433.07 -> 448 (step 32 in [256, 448]: 433 is nearer
// 448 than 416); an all-zero group stays zero; a shorter last group has its own scale.
TEST(Fp8BlockCpuKernels, ReferenceW8A8QuantizesActivationsPerTokenGroup) {
  const std::vector<float> x = {3.0f, -1.0f, 0.1f, 2.9f, 0, 0, 0, 0, 0.5f, -0.25f};
  const std::vector<float> q = fp8_group_qdq_activation(x.data(), 1, 10, 4);
  const float s = 3.0f / 448.0f, s2 = 0.5f / 448.0f;
  const std::vector<float> want = {448 * s, -144 * s, 15 * s, 448 * s, 0, 0, 0, 0, 448 * s2, -224 * s2};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_FLOAT_EQ(q[i], want[i]) << i;
  EXPECT_EQ(q[1], e4m3_to_f32(f32_to_e4m3(-1.0f / s)) * s);  // true division, then × s
  // The same rule through the reference backend with the W8A8 key: y = Σ q(x) · w.
  auto layer = make_block_layer({3, 10, {3}, 2, 4, false, kFp8Block, 4});
  const LinearWeights w = weights_of(layer);
  ThreadPool pool(1);
  const std::vector<float> y =
      testing::run(*testing::make("reference", w, DType::F32), testing::to_act(x, DType::F32), 1, 3, DType::F32, pool);
  for (int64_t r = 0; r < 3; ++r) {
    const std::vector<double> row = block_row_f64(w, r);
    double acc = 0;
    for (int j = 0; j < 10; ++j) acc += static_cast<double>(want[j]) * row[j];
    EXPECT_NEAR(y[r], acc, 1e-6 * std::fabs(acc) + 1e-12) << r;
  }
}

TEST(Fp8BlockCpuKernels, BadWeightsAreLoadErrors) {
  for (const std::string& backend : block_backends()) {
    if (backend == "reference") continue;
    auto layer = make_block_layer({8, 32, {8}, 4, 16, false, kFp8BlockW8A16, 3});
    layer->codes[0][5 * 32 + 7] = 0x7F;
    std::string e = test::error_of([&] { testing::make(backend, weights_of(layer), DType::BF16); });
    EXPECT_NE(e.find("test.fp8block.shard0: weight element [5, 7] is the E4M3 NaN byte 0x7F"), std::string::npos) << e;
    layer = make_block_layer({8, 32, {8}, 4, 16, false, kFp8BlockW8A16, 3});
    layer->weights.shards[0].as<Fp8BlockView>().scales[3] = NAN;
    e = test::error_of([&] { testing::make(backend, weights_of(layer), DType::BF16); });
    EXPECT_NE(e.find("block scale [1, 1] is nan"), std::string::npos) << e;
    layer->weights.shards[0].as<Fp8BlockView>().scales.pop_back();
    e = test::error_of([&] { testing::make(backend, weights_of(layer), DType::BF16); });
    EXPECT_NE(e.find("block scales hold 3 values in 2 columns, expected [2, 2]"), std::string::npos) << e;
  }
}

TEST(Fp8BlockCpuKernels, OracleSelectsAW8A16BackendForBothKeysAndNamesTheFormat) {
  for (QuantKey key : {kFp8Block, kFp8BlockW8A16}) {
    Selection s = select_linear({key, DType::BF16, 64, 64, {}}, "x");
    const std::string want = block_backends().front();
    EXPECT_EQ(s.backend->name, want);
    EXPECT_EQ(selection_message(s, LayerKind::linear, key).rfind("Using '" + want + "' block-FP8 Linear backend", 0), 0u);
    EXPECT_EQ(select_moe({key, DType::BF16, 4, 2, 64, 32, {}}, "x").backend->name, want);
  }
  EXPECT_EQ(scheme_name(kFp8Block), "fp8_block");
  EXPECT_EQ(scheme_name(kFp8BlockW8A16), "fp8_block_w8a16");
}

TEST(Fp8BlockCpuKernels, GroupedMoeMatchesReferenceMoeAndIsBatchInvariant) {
  const int64_t experts = 4, hidden = 96, inter = 80, top_k = 2, m = 40;
  MoeWeights mw;
  mw.key = kFp8BlockW8A16;
  mw.num_experts = experts;
  mw.hidden = hidden;
  mw.inter = inter;
  std::vector<std::shared_ptr<BlockLayer>> keep;
  uint32_t seed = 60;
  for (int64_t e = 0; e < experts; ++e) {
    keep.push_back(make_block_layer({2 * inter, hidden, {inter, inter}, 32, 64, false, kFp8BlockW8A16, seed++}));
    mw.w13.push_back(weights_of(keep.back()));
    keep.push_back(make_block_layer({hidden, inter, {hidden}, 32, 64, false, kFp8BlockW8A16, seed++}));
    mw.w2.push_back(weights_of(keep.back()));
  }
  const testing::Top2Routing routing = testing::top2_routing(m, experts, 0.6f, 0.4f);
  const std::vector<int32_t>& ids = routing.ids;
  const std::vector<float>& wts = routing.weights;
  const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, hidden, 9, 0.5f), DType::BF16);
  auto run_moe = [&](const std::string& name, ThreadPool& pool, int64_t t0, int64_t count) {
    const Backend* b = find_backend(name, LayerKind::moe);
    MoeProblem p{kFp8BlockW8A16, DType::BF16, experts, top_k, hidden, inter, {}};
    EXPECT_EQ(rejection_reason(*b, p), "");
    std::vector<uint16_t> y(static_cast<size_t>(count * hidden));
    b->make_moe(mw, p)->forward(xa.data() + t0 * hidden * 2, count, ids.data() + t0 * top_k, wts.data() + t0 * top_k,
                                top_k, y.data(), pool);
    return testing::from_act(y.data(), DType::BF16, y.size());
  };
  ThreadPool one(1), three(3);
  const std::vector<float> ref = run_moe("reference", one, 0, m);
  for (const std::string& backend : block_backends()) {
    if (backend == "reference") continue;
    SCOPED_TRACE(backend);
    const std::vector<float> y1 = run_moe(backend, one, 0, m), y3 = run_moe(backend, three, 0, m);
    ASSERT_EQ(0, std::memcmp(y1.data(), y3.data(), y1.size() * sizeof(float)));
    double err = 0, norm = 0;
    for (size_t i = 0; i < ref.size(); ++i) err += (y1[i] - ref[i]) * (y1[i] - ref[i]), norm += ref[i] * ref[i];
    EXPECT_GT(norm, 0.0);
    EXPECT_LT(std::sqrt(err / norm), 4e-3);  // bf16 roundings of h13 / intermediate / output may flip
    for (int64_t t = 0; t < m; t += 7) {
      const std::vector<float> yt = run_moe(backend, three, t, 1);
      ASSERT_EQ(0, std::memcmp(yt.data(), y1.data() + t * hidden, hidden * sizeof(float))) << "token " << t;
    }
  }
}

}  // namespace
}  // namespace fp4lm::kernels::fp8_block_cpu_kernels_test
