// The AVX-512-BF16 W4A16 GEMM kernel (cpu_w4a16_avx512_gemm, src/kernels/cpu/avx512/
// nvfp4_w4a16_gemm.cpp; and the W4A4 one, cpu_w4a4_avx512_gemm, nvfp4_w4a4_gemm.cpp) at the shapes its tiling has edges at: M around and between its 6-token
// tiles (from its 64-token threshold), N not a multiple of its 16-row vectors or 32-row tiles and
// spanning several decoded row groups, K with a partial 256-element super-chunk. It must give the
// cpu_w4a16_avx512 bits for every M (batch invariance: M picks the schedule), and fp64 of the same
// operands within the W4A16 bound. The generic backend tests (nvfp4_cpu_kernels_test.cpp) run it
// too, through the registry. Skipped with the backend's reason where the CPU lacks AVX-512-BF16.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "kernels/registry.h"

namespace fp4lm::kernels::nvfp4_w4a16_gemm_test {
namespace {

constexpr const char* kGemm = "cpu_w4a16_avx512_gemm";
constexpr const char* kRegister = "cpu_w4a16_avx512";

struct Shape {
  int64_t n, k;
  std::vector<int64_t> shards;
  bool bias;
};

// n: 1 (one partial row vector), 17 / 47 (partial second), 300 (several row groups, a partial
// last row vector); k: 16 and 48 (one partial super-chunk), 256 (exactly one), 4112 (16 + 1).
const std::vector<Shape> kShapes = {
    {1, 16, {1}, false},         {17, 48, {9, 8}, true},          {47, 256, {47}, false},
    {300, 272, {100, 200}, true}, {64, 4112, {32, 32}, false},     {300, 4112, {120, 100, 80}, true},
};
// Below the GEMM's threshold (kW4a16GemmMinTokens = 64: the panel schedule), at it, and 1-5 past
// whole 6-token tiles.
const std::vector<int64_t> kTokens = {15, 63, 64, 65, 71, 100};

std::vector<uint8_t> forward(const LinearKernel& kern, const std::vector<uint8_t>& x, int64_t m, int64_t n,
                             DType act, ThreadPool& pool) {
  std::vector<uint8_t> y(static_cast<size_t>(m * n) * dtype_size(act), 0xAB);
  kern.forward(x.data(), m, y.data(), pool);
  return y;
}

TEST(Nvfp4W4a16Gemm, SameBitsAsTheRegisterKernelForEveryM) {
  REQUIRE_BACKEND(kGemm, LayerKind::linear);
  REQUIRE_BACKEND(kRegister, LayerKind::linear);
  ThreadPool pool(2);
  uint32_t seed = 400;
  for (const Shape& s : kShapes)
    for (DType act : {DType::BF16, DType::F16, DType::F32}) {
      SCOPED_TRACE("n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " act=" + std::string(dtype_name(act)));
      auto layer = testing::make_layer({s.n, s.k, s.shards, s.bias, kNvfp4W4A16, seed++});
      const LinearWeights w = testing::weights_of(layer);
      auto gemm = testing::make(kGemm, w, act);
      auto reg = testing::make(kRegister, w, act);
      const size_t es = dtype_size(act), row = static_cast<size_t>(s.n) * es;
      const int64_t mmax = kTokens.back();
      // Token 3 has a NaN and token 70 an infinity: those tokens' outputs are NaN / ±inf, stored
      // by the GEMM's vector epilogue with the scalar epilogue's bits (the NaN quieted the same way).
      std::vector<float> x = testing::make_activations(mmax, s.k, seed++);
      x[static_cast<size_t>(3 * s.k)] = std::numeric_limits<float>::quiet_NaN();
      x[static_cast<size_t>(70 * s.k + s.k / 2)] = std::numeric_limits<float>::infinity();
      const std::vector<uint8_t> xa = testing::to_act(x, act);
      for (int64_t m : kTokens) {
        const std::vector<uint8_t> y = forward(*gemm, xa, m, s.n, act, pool);
        EXPECT_EQ(y, forward(*reg, xa, m, s.n, act, pool)) << "m=" << m;
      }
      // Each token alone (M = 1: the GEMV) against its row of the largest call.
      const std::vector<uint8_t> all = forward(*gemm, xa, mmax, s.n, act, pool);
      for (int64_t t = 0; t < mmax; t += 9) {
        const std::vector<uint8_t> one(xa.begin() + t * s.k * es, xa.begin() + (t + 1) * s.k * es);
        EXPECT_EQ(0, std::memcmp(forward(*gemm, one, 1, s.n, act, pool).data(), all.data() + t * row, row))
            << "token " << t;
      }
    }
}

// The W4A4 GEMM (cpu_w4a4_avx512_gemm, nvfp4_w4a4_gemm.cpp): cpu_w4a4_avx512's bits for every M,
// with the layer's static input scale and with each token's own (dynamic) scale, and each token
// alone. The integer block sums are exact in any order; the scale product, FMA, tree and epilogue
// must match.
TEST(Nvfp4W4a16Gemm, W4a4SameBitsAsTheRegisterKernelForEveryM) {
  constexpr const char* kW4a4Gemm = "cpu_w4a4_avx512_gemm";
  constexpr const char* kW4a4 = "cpu_w4a4_avx512";
  REQUIRE_BACKEND(kW4a4Gemm, LayerKind::linear);
  REQUIRE_BACKEND(kW4a4, LayerKind::linear);
  ThreadPool pool(2);
  uint32_t seed = 700;
  for (const Shape& s : kShapes)
    for (bool dynamic : {false, true})
      for (DType act : {DType::BF16, DType::F32}) {
        SCOPED_TRACE("n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " act=" +
                     std::string(dtype_name(act)) + (dynamic ? " dynamic" : " static"));
        auto layer = testing::make_layer({s.n, s.k, s.shards, s.bias, kNvfp4W4A4, seed++});
        LinearWeights w = testing::weights_of(layer);
        w.per_token_input_scale = dynamic;
        auto gemm = testing::make(kW4a4Gemm, w, act);
        auto reg = testing::make(kW4a4, w, act);
        const size_t es = dtype_size(act), row = static_cast<size_t>(s.n) * es;
        const int64_t mmax = kTokens.back();
        const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(mmax, s.k, seed++), act);
        // Around the W4A4 GEMM's threshold (kW4a4GemmMinTokens = 24) and past whole 6-token tiles.
        for (int64_t m : {int64_t{15}, int64_t{23}, int64_t{24}, int64_t{25}, int64_t{71}, mmax})
          EXPECT_EQ(forward(*gemm, xa, m, s.n, act, pool), forward(*reg, xa, m, s.n, act, pool)) << "m=" << m;
        const std::vector<uint8_t> all = forward(*gemm, xa, mmax, s.n, act, pool);
        for (int64_t t = 0; t < mmax; t += 9) {
          const std::vector<uint8_t> one(xa.begin() + t * s.k * es, xa.begin() + (t + 1) * s.k * es);
          EXPECT_EQ(0, std::memcmp(forward(*gemm, one, 1, s.n, act, pool).data(), all.data() + t * row, row))
              << "token " << t;
        }
      }
}

// Against fp64 of the same operands (the act-dtype x times the dequantized weights): every
// product is exact (e2m1 × e4m3 × bf16 pieces), so the only error is fp32 summation,
// |y - e| <= 1e-5 · Σ|terms| + half an output ulp (the bound of every W4A16 backend).
TEST(Nvfp4W4a16Gemm, MatchesFp64AtLargeM) {
  REQUIRE_BACKEND(kGemm, LayerKind::linear);
  ThreadPool pool(2);
  uint32_t seed = 500;
  for (const Shape& s : kShapes)
    for (DType act : {DType::BF16, DType::F32}) {
      SCOPED_TRACE("n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " act=" + std::string(dtype_name(act)));
      auto layer = testing::make_layer({s.n, s.k, s.shards, s.bias, kNvfp4W4A16, seed++});
      const LinearWeights w = testing::weights_of(layer);
      const int64_t m = 70;
      const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, s.k, seed++), act);
      const std::vector<float> xr = testing::from_act(xa.data(), act, static_cast<size_t>(m * s.k));
      testing::expect_within_f64_bound(testing::run(*testing::make(kGemm, w, act), xa, m, s.n, act, pool),
                                       testing::expected_f64(w, xr, m, false), act, kGemm, 1e-5);
    }
}

// The MoE backend: expert groups of 64+ tokens take the GEMM (top-2 of 150 tokens over 3 experts:
// 100 per expert), smaller calls the register schedule; the outputs are the cpu_w4a16_avx512
// MoE's bits, and a token's output is the one it gets alone.
TEST(Nvfp4W4a16Gemm, MoeSameBitsAsTheRegisterKernelAndPerToken) {
  REQUIRE_BACKEND(kGemm, LayerKind::moe);
  REQUIRE_BACKEND(kRegister, LayerKind::moe);
  ThreadPool pool(2);
  const int64_t experts = 3, hidden = 272, inter = 80, m = 150, top_k = 2;
  std::vector<std::shared_ptr<testing::TestLayer>> keep;
  MoeWeights w;
  w.key = kNvfp4W4A16;
  w.num_experts = experts;
  w.hidden = hidden;
  w.inter = inter;
  for (int64_t e = 0; e < experts; ++e) {
    keep.push_back(testing::make_layer({2 * inter, hidden, {inter, inter}, false, kNvfp4W4A16, 600 + 2 * uint32_t(e)}));
    w.w13.push_back(testing::weights_of(keep.back()));
    keep.push_back(testing::make_layer({hidden, inter, {hidden}, false, kNvfp4W4A16, 601 + 2 * uint32_t(e)}));
    w.w2.push_back(testing::weights_of(keep.back()));
  }
  const testing::Top2Routing r = testing::top2_routing(m, experts);
  for (DType act : {DType::BF16, DType::F32}) {
    SCOPED_TRACE(std::string(dtype_name(act)));
    auto kernel = [&](const char* name) {
      const MoeProblem p{w.key, act, experts, top_k, hidden, inter, {}};
      EXPECT_EQ(rejection_reason(*find_backend(name, LayerKind::moe), p), "");
      return find_backend(name, LayerKind::moe)->make_moe(w, p);
    };
    auto gemm = kernel(kGemm), reg = kernel(kRegister);
    const size_t es = dtype_size(act), row = static_cast<size_t>(hidden) * es;
    const std::vector<uint8_t> x = testing::to_act(testing::make_activations(m, hidden, 610, 4.0f), act);
    std::vector<uint8_t> y(m * row), yr(m * row), one(row);
    gemm->forward(x.data(), m, r.ids.data(), r.weights.data(), top_k, y.data(), pool);
    reg->forward(x.data(), m, r.ids.data(), r.weights.data(), top_k, yr.data(), pool);
    EXPECT_EQ(y, yr);
    for (int64_t t = 0; t < m; t += 37) {
      gemm->forward(x.data() + t * row, 1, r.ids.data() + t * top_k, r.weights.data() + t * top_k, top_k, one.data(),
                    pool);
      EXPECT_EQ(0, std::memcmp(one.data(), y.data() + t * row, row)) << "token " << t;
    }
  }
}

// The oracle puts the GEMM variant first wherever it can run, and FP4LM_DISABLE_ISA=avx512 or a CPU
// without AVX-512 takes it out with its reason (kernels/isa.h). It does not need avx512bf16: without
// it the kernels run vdpbf16ps's two-FMA form (nvfp4_w4a16_emulated_bf16_test.cpp).
TEST(Nvfp4W4a16Gemm, SelectedWhereAvailableElseSaysWhy) {
  const Backend* b = find_backend(kGemm, LayerKind::linear);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->isa.isa, Isa::avx512);
  EXPECT_FALSE(b->isa.cpu.has(CpuFeature::avx512bf16));
  const std::string why = testing::unavailable(kGemm, LayerKind::linear);
  EXPECT_EQ(why, isa_unavailable_reason(b->isa));
  const LinearProblem p{kNvfp4W4A16, DType::BF16, 64, 272, {}};
  if (why.empty())
    EXPECT_EQ(select_linear(p, "l").backend->name, kGemm);
  else
    EXPECT_NE(select_linear(p, "l").backend->name, kGemm) << why;
}

}  // namespace
}  // namespace fp4lm::kernels::nvfp4_w4a16_gemm_test
