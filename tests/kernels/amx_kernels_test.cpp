// The AMX kernels (kernels/cpu/amx_gemm.h's bodies) on every CPU through the scalar tile
// emulation (kernels/cpu/amx_tile_emulation.h), and natively where the CPU and Linux allow AMX
// (skipped with the backend's own reason otherwise):
//  - the emulation against the SDM's pseudo-code: order of accumulation, DAZ/FTZ, tile edges,
//    TDPBSSD's signed bytes and wrapping;
//  - the NVFP4 W4A16 and dense BF16 kernel bodies against fp64 within the stated bound
//    (docs/KERNELS.md, "AMX": γ_n Σ|products|, n = k_pad × pieces, plus the epilogue's rounding)
//    for many shapes (m, n, k not multiples of the tiles, several shards, bias, every act dtype),
//    bit-identical to the reference backend and every W4A16 backend where every sum is exact,
//    and batch / thread / row-split invariant bit for bit;
//  - the native tables against the emulated ones (within the bound: the hardware's order of
//    accumulation is not specified).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernel_test_support.h"
#include "kernels/cpu/amx_kernels.h"
#include "kernels/cpu/amx_panels.h"
#include "kernels/cpu/amx_tile_emulation.h"
#include "kernels/cpu/amx_tile_permission.h"
#include "kernels/cpu/dense_matrix.h"
#include "kernels/cpu/nvfp4_linear.h"
#include "kernels/registry.h"

namespace fp4lm::kernels::amx_kernels_test {
namespace {

using cpu::amx::EmulatedTiles;
using cpu::amx::TileConfig;

uint16_t bf(float f) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16); }

// A configuration with C = tile 0 (rows × 4n bytes), A = tile 1 (rows × 4·pairs), B = tile 2
// (pairs rows × 4n bytes).
TileConfig small_config(int rows, int n, int pairs) {
  TileConfig c;
  c.rows[0] = static_cast<uint8_t>(rows);
  c.colsb[0] = static_cast<uint16_t>(4 * n);
  c.rows[1] = static_cast<uint8_t>(rows);
  c.colsb[1] = static_cast<uint16_t>(4 * pairs);
  c.rows[2] = static_cast<uint8_t>(pairs);
  c.colsb[2] = static_cast<uint16_t>(4 * n);
  return c;
}

// The pseudo-code's order: per pair k, the even product then the odd one, each a fused
// multiply-add into the running fp32 sum. With acc = 1 and products 2^-24, 2^-24, 2^-23: in
// order 1 + 2^-24 = 1 (tie to even), again 1, then 1 + 2^-23; a pairwise sum of the products
// first would give 1 + 2^-22.
TEST(AmxTileEmulation, Dpbf16psAccumulatesInThePseudoCodesOrder) {
  EmulatedTiles t;
  t.configure(small_config(1, 1, 2));
  const float c0 = 1.0f;
  const uint16_t a[4] = {bf(0x1p-24f), bf(0x1p-24f), bf(0x1p-23f), bf(0.0f)};
  const uint16_t b[2][2] = {{bf(1.0f), bf(1.0f)}, {bf(1.0f), bf(1.0f)}};
  t.load_tile(0, &c0, 4);
  t.load_tile(1, a, 8);
  t.load_tile(2, b, 4);
  t.dpbf16ps<0, 1, 2>();
  float c = 0;
  t.store_tile(0, &c, 4);
  EXPECT_EQ(c, 1.0f + 0x1p-23f);
  // Each step is one fma: a product that is not a float's worth of bits is still exact.
  EXPECT_EQ(cpu::amx::emulated_bf16_fma(bf(1.0078125f), bf(1.0078125f), -1.0f), 0x1p-6f + 0x1p-14f);
}

TEST(AmxTileEmulation, DenormalInputsReadAsZeroAndDenormalResultsFlush) {
  // bf16 0x0001 is 2^-133 (a denormal): read as zero, 1 · it adds nothing.
  EXPECT_EQ(cpu::amx::emulated_bf16_fma(0x0001, bf(1.0f), 5.0f), 5.0f);
  EXPECT_EQ(cpu::amx::emulated_bf16_fma(bf(1.0f), 0x8001, 5.0f), 5.0f);
  // 2^-100 · 2^-30 = 2^-130 is denormal in fp32: flushed to (signed) zero.
  const float r = cpu::amx::emulated_bf16_fma(bf(0x1p-100f), bf(-0x1p-30f), 0.0f);
  EXPECT_EQ(r, 0.0f);
  EXPECT_TRUE(std::signbit(r));
  // A normal result of normal inputs is the plain fma.
  EXPECT_EQ(cpu::amx::emulated_bf16_fma(bf(0x1p-60f), bf(0x1p-60f), 0.0f), 0x1p-120f);
}

TEST(AmxTileEmulation, LoadsZeroPastTheConfiguredShapeAndStoresOnlyIt) {
  EmulatedTiles t;
  TileConfig c;
  c.rows[3] = 2;
  c.colsb[3] = 8;
  t.configure(c);
  std::vector<uint8_t> src(64 * 16, 0xEE), dst(64 * 16, 0x11);
  for (int i = 0; i < 64 * 16; ++i) src[i] = static_cast<uint8_t>(i);
  t.load_tile(3, src.data(), 100);
  t.store_tile(3, dst.data(), 16);
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 16; ++j) {
      const uint8_t want = r < 2 && j < 8 ? static_cast<uint8_t>(r * 100 + j) : 0x11;
      EXPECT_EQ(dst[r * 16 + j], want) << "row " << r << " byte " << j;
    }
  // Unconfigured tiles and mismatched shapes are errors (the hardware's #UD).
  EXPECT_THROW(t.zero_tile(0), Error);
  EXPECT_THROW(t.dpbf16ps_tiles(3, 3, 3), Error);
  EmulatedTiles u;
  EXPECT_THROW(u.load_tile(0, src.data(), 64), Error);
}

TEST(AmxTileEmulation, DpbssdMultipliesSignedBytesAndWraps) {
  EmulatedTiles t;
  t.configure(small_config(2, 2, 1));
  // A: 2 rows × 4 bytes; B: 1 row × (2 columns × 4 bytes); C: 2 × 2 dwords.
  const int8_t a[2][4] = {{1, -2, 3, -128}, {127, 127, 127, 127}};
  const int8_t b[1][8] = {{5, 6, -7, -128, 127, 1, 0, -1}};
  const int32_t c0[2][2] = {{10, 0}, {2147483647, -5}};
  t.load_tile(0, c0, 8);
  t.load_tile(1, a, 4);
  t.load_tile(2, b, 8);
  t.dpbssd<0, 1, 2>();
  int32_t c[2][2];
  t.store_tile(0, c, 8);
  EXPECT_EQ(c[0][0], 10 + 5 - 12 - 21 + 16384);
  EXPECT_EQ(c[0][1], 0 + 127 - 2 + 0 + 128);
  // 2147483647 + 127·(5 + 6 - 7 - 128) wraps? no: it decreases; the second column wraps up.
  EXPECT_EQ(c[1][0], 2147483647 + 127 * (5 + 6 - 7 - 128));
  EXPECT_EQ(static_cast<uint32_t>(c[1][1]), static_cast<uint32_t>(-5) + 127u * 127u);
  int32_t big[2][2] = {{2147483647, 0}, {0, 0}};
  const int8_t ones[2][4] = {{1, 0, 0, 0}, {0, 0, 0, 0}};
  const int8_t bones[1][8] = {{1, 0, 0, 0, 0, 0, 0, 0}};
  t.load_tile(0, big, 8);
  t.load_tile(1, ones, 4);
  t.load_tile(2, bones, 8);
  t.dpbssd<0, 1, 2>();
  t.store_tile(0, big, 8);
  EXPECT_EQ(big[0][0], std::numeric_limits<int32_t>::min());  // 32-bit wrap
}

// ---- the kernel bodies -------------------------------------------------------------------

// The stated bound (docs/KERNELS.md, "AMX"): C sums n = k_pad × pieces exact products in fp32 in
// some order: |C - Σ| ≤ γ_n Σ|products|, γ_n = n u / (1 - n u), u = 2^-24; the epilogue's fma adds
// one rounding of the result (≤ u Σ|terms| relative to the magnitude). As a relative factor of
// the magnitude Σ|x · W| + |bias|.
double stated_bound(int64_t k, DType act) {
  const double n = static_cast<double>(cpu::amx::padded_k(k) * cpu::amx::amx_pieces(act));
  const double u = 0x1p-24;
  return n * u / (1 - n * u) + 2 * u;
}

std::unique_ptr<LinearKernel> emulated_nvfp4(const LinearWeights& w, DType act) {
  LinearProblem p{w.key, act, w.n, w.k, {}};
  return std::make_unique<cpu::Nvfp4Linear>(w, p, cpu::Nvfp4Mode::w4a16, cpu::nvfp4_kernels_amx_emulated());
}

struct Shape {
  int64_t n, k, m;
  std::vector<int64_t> shards;
  bool bias;
};

// m, n, k around and across the tiles (16 tokens, 32 rows, 32 k); several shards with their own
// global scales.
const Shape kShapes[] = {
    {1, 16, 1, {1}, false},          {17, 48, 15, {17}, true},     {32, 32, 16, {32}, false},
    {33, 272, 17, {20, 13}, true},   {70, 80, 33, {64, 6}, false}, {40, 1040, 40, {8, 32}, true},
    {96, 512, 3, {32, 32, 32}, true}};

TEST(AmxNvfp4Emulated, MatchesFp64WithinTheStatedBoundForManyShapes) {
  ThreadPool pool(2);
  uint32_t seed = 3;
  for (const Shape& s : kShapes)
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {
      auto layer = testing::make_layer({s.n, s.k, s.shards, s.bias, kNvfp4W4A16, seed++});
      const LinearWeights w = testing::weights_of(layer);
      const std::vector<float> x = testing::from_act(
          testing::to_act(testing::make_activations(s.m, s.k, seed++), act).data(), act, static_cast<size_t>(s.m * s.k));
      const std::string what = "n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " m=" +
                               std::to_string(s.m) + " " + std::string(dtype_name(act));
      const std::vector<float> y = testing::run(*emulated_nvfp4(w, act), testing::to_act(x, act), s.m, s.n, act, pool);
      testing::expect_within_f64_bound(y, testing::expected_f64(w, x, s.m, false), act, what, stated_bound(s.k, act));
    }
}

// A layer whose every product and partial sum is exact in fp32: E4M3 block scales 0.5, 1, 2
// (weights multiples of 2^-2 up to 12), a power-of-two global scale, integer activations in
// [-8, 8], bias multiples of 2^-4. Then every summation order gives the fp64 value exactly, so
// the AMX body, `reference` and every W4A16 backend agree bit for bit.
struct ExactLayer {
  std::vector<uint8_t> codes, scales;
  LinearWeights w;
};
std::shared_ptr<ExactLayer> make_exact_layer(int64_t n, int64_t k, uint32_t seed) {
  auto l = std::make_shared<ExactLayer>();
  std::mt19937 rng(seed);
  l->codes.resize(static_cast<size_t>(n * k / 2));
  l->scales.resize(static_cast<size_t>(n * k / 16));
  for (auto& c : l->codes) c = static_cast<uint8_t>(rng());
  const uint8_t e4m3[3] = {0x30, 0x38, 0x40};  // 0.5, 1, 2
  for (auto& s : l->scales) s = e4m3[rng() % 3];
  l->w.key = kNvfp4W4A16;
  l->w.n = n;
  l->w.k = k;
  WeightShard sh;
  sh.name = "test.exact";
  sh.rows = n;
  sh.view = Nvfp4View{l->codes.data(), l->scales.data(), 0x1p-3f, 0.0f};
  l->w.shards.push_back(sh);
  for (int64_t r = 0; r < n; ++r) l->w.bias.push_back(static_cast<float>(static_cast<int>(rng() % 65) - 32) * 0x1p-4f);
  return l;
}

TEST(AmxNvfp4Emulated, BitIdenticalToEveryW4a16BackendWhereEverySumIsExact) {
  ThreadPool pool(2);
  for (auto [n, k, m] : {std::tuple<int64_t, int64_t, int64_t>{33, 272, 19}, {64, 64, 16}, {5, 1040, 3}}) {
    auto layer = make_exact_layer(n, k, static_cast<uint32_t>(n + k));
    LinearWeights w = layer->w;
    w.keepalive = layer;
    std::mt19937 rng(7);
    std::vector<float> x(static_cast<size_t>(m * k));
    for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 17) - 8);
    const testing::Expected e = testing::expected_f64(w, x, m, false);
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " " + std::string(dtype_name(act)));
      const std::vector<uint8_t> xa = testing::to_act(x, act);
      const std::vector<float> y = testing::run(*emulated_nvfp4(w, act), xa, m, n, act, pool);
      // The fp64 value is a float exactly; the kernel's is it rounded once to the act dtype.
      std::vector<float> ey(e.y.begin(), e.y.end());
      for (size_t i = 0; i < ey.size(); ++i) ASSERT_EQ(static_cast<double>(ey[i]), e.y[i]) << "element " << i;
      ey = testing::from_act(testing::to_act(ey, act).data(), act, ey.size());
      ASSERT_EQ(y, ey);
      for (const std::string& b : testing::runnable_backends_with_scheme(LayerKind::linear, kNvfp4W4A16)) {
        const std::vector<float> other = testing::run(*testing::make(b, w, act), xa, m, n, act, pool);
        EXPECT_EQ(0, std::memcmp(other.data(), y.data(), y.size() * sizeof(float))) << b;
      }
    }
  }
}

// Each (row, token) result is one fixed sequence of tile operations: a token alone, any slice of
// the batch, any thread count (so any row split) give the same bits.
TEST(AmxNvfp4Emulated, TokenResultsIndependentOfBatchThreadsAndRowSplit) {
  auto layer = testing::make_layer({70, 272, {40, 30}, true, kNvfp4W4A16, 21});
  const LinearWeights w = testing::weights_of(layer);
  const int64_t m = 37;
  for (DType act : {DType::BF16, DType::F32}) {
    const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, 272, 22), act);
    const size_t es = dtype_size(act);
    ThreadPool one(1), three(3);
    auto kern = emulated_nvfp4(w, act);
    std::vector<uint8_t> all(static_cast<size_t>(m * 70) * es), all3(all.size());
    kern->forward(xa.data(), m, all.data(), one);
    kern->forward(xa.data(), m, all3.data(), three);
    EXPECT_EQ(all, all3);
    for (int64_t t : {int64_t{0}, int64_t{16}, int64_t{36}}) {
      std::vector<uint8_t> y(70 * es);
      kern->forward(xa.data() + static_cast<size_t>(t * 272) * es, 1, y.data(), one);
      EXPECT_EQ(0, std::memcmp(y.data(), all.data() + static_cast<size_t>(t * 70) * es, y.size())) << "token " << t;
    }
  }
}

// The activation pieces sum to x exactly (f32: three, f16: two, bf16: one), padding is zero.
TEST(AmxPanels, ActivationPiecesSumToXExactly) {
  const int64_t m = 3, k = 40;
  std::vector<float> x = testing::make_activations(m, k, 5);
  x[1] = 0x1.fffffep-1f;  // 24 significant bits
  x[2] = -3.1415927f;
  for (DType act : {DType::F32, DType::F16, DType::BF16}) {
    const std::vector<uint8_t> xa = testing::to_act(x, act);
    const std::vector<float> xr = testing::from_act(xa.data(), act, x.size());
    auto in = cpu::amx::make_amx_input(xa.data(), act, m, k);
    ASSERT_EQ(in->pieces, cpu::amx::amx_pieces(act));
    ASSERT_EQ(in->m_pad, 16);
    ASSERT_EQ(in->k_pad, 64);
    const size_t plane = static_cast<size_t>(in->m_pad * in->k_pad);
    for (int64_t t = 0; t < in->m_pad; ++t)
      for (int64_t j = 0; j < in->k_pad; ++j) {
        double sum = 0;
        for (int p = 0; p < in->pieces; ++p) sum += bf16_to_f32(in->x[p * plane + static_cast<size_t>(t * in->k_pad + j)]);
        const double want = t < m && j < k ? static_cast<double>(xr[t * k + j]) : 0.0;
        ASSERT_EQ(sum, want) << dtype_name(act) << " t=" << t << " j=" << j;
      }
  }
}

// The panel holds e2m1 × E4M3 as exact bf16 values in the tile layout: W[n][j] at tile
// (n / 16, j / 32), tile row (j % 32) / 2, uint16 2 (n % 16) + j % 2; zero past the rows and k.
TEST(AmxPanels, Nvfp4PanelIsTheExactWeightsInTheTileLayout) {
  auto layer = testing::make_layer({40, 48, {40}, false, kNvfp4W4A16, 8});
  const LinearWeights w = testing::weights_of(layer);
  const cpu::Nvfp4Matrix mat = cpu::prepare_nvfp4_matrix(w, false);
  const int64_t k_tiles = 2;
  std::vector<uint16_t> panel(static_cast<size_t>(2 * k_tiles * 512), 0xEEEE);
  cpu::amx::decode_nvfp4_panel(mat, 32, 8, panel.data());  // rows 32-39: 8 of the 32
  for (int64_t n = 0; n < 32; ++n) {
    const std::vector<double> row = n < 8 ? testing::weight_row_f64(w, 32 + n) : std::vector<double>(48, 0.0);
    for (int64_t j = 0; j < 64; ++j) {
      const uint16_t v = panel[static_cast<size_t>(((n / 16) * k_tiles + j / 32) * 512 + (j % 32) / 2 * 32 + 2 * (n % 16) + j % 2)];
      const double want = j < 48 ? row[j] / mat.row_global[32] : 0.0;
      ASSERT_EQ(static_cast<double>(bf16_to_f32(v)), want) << "n=" << n << " j=" << j;
    }
  }
}

// ---- dense BF16 ----------------------------------------------------------------------------

struct DenseLayer {
  std::vector<uint16_t> data;
  LinearWeights w;
};
std::shared_ptr<DenseLayer> make_bf16_layer(int64_t n, int64_t k, bool bias, uint32_t seed, bool integers = false) {
  auto l = std::make_shared<DenseLayer>();
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  l->data.resize(static_cast<size_t>(n * k));
  for (auto& v : l->data) v = f32_to_bf16(integers ? static_cast<float>(static_cast<int>(rng() % 9) - 4) : normal(rng));
  l->w.key = kUnquantized;
  l->w.n = n;
  l->w.k = k;
  WeightShard sh;
  sh.name = "test.dense";
  sh.rows = n;
  sh.view = DenseView{DType::BF16, l->data.data()};
  l->w.shards.push_back(sh);
  if (bias)
    for (int64_t r = 0; r < n; ++r) l->w.bias.push_back(integers ? static_cast<float>(r % 7) : normal(rng));
  return l;
}

testing::Expected dense_f64(const LinearWeights& w, const std::vector<float>& x, int64_t m) {
  const auto* d = static_cast<const uint16_t*>(w.shards[0].as<DenseView>().data);
  return testing::linear_f64(w, std::vector<double>(x.begin(), x.end()), m, [&](int64_t r) {
    std::vector<double> row(static_cast<size_t>(w.k));
    for (int64_t j = 0; j < w.k; ++j) row[j] = bf16_to_f32(d[r * w.k + j]);
    return row;
  });
}

std::unique_ptr<LinearKernel> emulated_dense(const LinearWeights& w, DType act) {
  LinearProblem p{w.key, act, w.n, w.k, {}};
  return std::make_unique<cpu::DenseLinear>(w, p, cpu::dense_kernels_amx_emulated(), cpu::prepare_dense_matrix,
                                            "dense AMX kernel (emulated)");
}

TEST(AmxDenseEmulated, MatchesFp64WithinTheStatedBoundAndExactSumsBitForBit) {
  ThreadPool pool(2);
  for (auto [n, k, m] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {33, 5, 17}, {70, 300, 33}, {32, 64, 16}}) {
    for (DType act : {DType::F32, DType::BF16, DType::F16}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + " m=" + std::to_string(m) + " " +
                   std::string(dtype_name(act)));
      auto layer = make_bf16_layer(n, k, true, static_cast<uint32_t>(n * k));
      LinearWeights w = layer->w;
      w.keepalive = layer;
      const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(m, k, 4), act);
      const std::vector<float> x = testing::from_act(xa.data(), act, static_cast<size_t>(m * k));
      testing::expect_within_f64_bound(testing::run(*emulated_dense(w, act), xa, m, n, act, pool), dense_f64(w, x, m),
                                       act, "dense", stated_bound(k, act));
      // Integer weights and activations: every sum exact, the reference backend's bits.
      auto ilayer = make_bf16_layer(n, k, true, 9, true);
      LinearWeights iw = ilayer->w;
      iw.keepalive = ilayer;
      std::vector<float> ix(static_cast<size_t>(m * k));
      for (size_t i = 0; i < ix.size(); ++i) ix[i] = static_cast<float>(static_cast<int>(i % 13) - 6);
      const std::vector<uint8_t> ixa = testing::to_act(ix, act);
      const std::vector<float> y = testing::run(*emulated_dense(iw, act), ixa, m, n, act, pool);
      const std::vector<float> ref = testing::run(*testing::make("reference", iw, act), ixa, m, n, act, pool);
      EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)));
    }
  }
}

TEST(AmxDenseEmulated, NonBf16WeightRowsWithoutAFallbackAreAClearError) {
  ThreadPool pool(1);
  std::vector<float> data(4 * 8, 0.5f);
  LinearWeights w;
  w.key = kUnquantized;
  w.n = 4;
  w.k = 8;
  WeightShard sh;
  sh.name = "test.f32";
  sh.rows = 4;
  sh.view = DenseView{DType::F32, data.data()};
  w.shards.push_back(sh);
  const std::vector<uint8_t> xa = testing::to_act(std::vector<float>(8, 1.0f), DType::F32);
  try {
    testing::run(*emulated_dense(w, DType::F32), xa, 1, 4, DType::F32, pool);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float32 weight rows [0, 4)"), std::string::npos) << e.what();
  }
}

// ---- native ---------------------------------------------------------------------------------

// Where AMX may not run, the backends say why (the ISA check first, then Linux's permission).
TEST(AmxNative, UnavailableBackendsSayWhy) {
  for (const char* name : {"cpu_w4a16_amx", "cpu_dense_amx"}) {
    const Backend* b = find_backend(name, LayerKind::linear);
#ifndef FP4LM_HAVE_AMX_KERNELS
    EXPECT_EQ(b, nullptr) << name;
    GTEST_SKIP() << "built without the AMX kernels";
#else
    ASSERT_NE(b, nullptr) << name;
    EXPECT_EQ(b->isa.isa, Isa::amx);
    const std::string why = b->unavailable_reason();
    if (!cpu_features().has(CpuFeature::amx_bf16) && !disabled_isa()) {
      EXPECT_NE(why.find("CPU lacks"), std::string::npos) << why;
      EXPECT_NE(why.find("amx-bf16"), std::string::npos) << why;
    }
    if (why.empty()) {
      EXPECT_EQ(cpu::amx_tile_permission_reason(), "");
    }
    std::cout << "[ note ] " << name << ": " << (why.empty() ? "available" : why) << "\n";
#endif
  }
}

// On an AMX CPU: the native tables against the emulated ones (the same body; within twice the
// bound, the hardware's order of accumulation being unspecified) and fp64, and the exact case
// bit for bit.
TEST(AmxNative, NativeKernelsMatchTheEmulationAndFp64) {
  REQUIRE_BACKEND("cpu_w4a16_amx", LayerKind::linear);
  ThreadPool pool(2);
  uint32_t seed = 40;
  for (const Shape& s : kShapes)
    for (DType act : {DType::F32, DType::BF16}) {
      auto layer = testing::make_layer({s.n, s.k, s.shards, s.bias, kNvfp4W4A16, seed++});
      const LinearWeights w = testing::weights_of(layer);
      const std::vector<uint8_t> xa = testing::to_act(testing::make_activations(s.m, s.k, seed++), act);
      const std::vector<float> x = testing::from_act(xa.data(), act, static_cast<size_t>(s.m * s.k));
      const std::vector<float> native = testing::run(*testing::make("cpu_w4a16_amx", w, act), xa, s.m, s.n, act, pool);
      const std::vector<float> emu = testing::run(*emulated_nvfp4(w, act), xa, s.m, s.n, act, pool);
      const testing::Expected e = testing::expected_f64(w, x, s.m, false);
      testing::expect_within_f64_bound(native, e, act, "native", stated_bound(s.k, act));
      testing::Expected around_emu = e;
      for (size_t i = 0; i < emu.size(); ++i) around_emu.y[i] = emu[i];
      testing::expect_within_f64_bound(native, around_emu, act, "native vs emulated", 2 * stated_bound(s.k, act));
    }
  auto exact = make_exact_layer(33, 272, 2);
  LinearWeights w = exact->w;
  w.keepalive = exact;
  std::vector<float> x(static_cast<size_t>(19 * 272));
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(static_cast<int>(i % 17) - 8);
  const std::vector<uint8_t> xa = testing::to_act(x, DType::BF16);
  const std::vector<float> native = testing::run(*testing::make("cpu_w4a16_amx", w, DType::BF16), xa, 19, 33, DType::BF16, pool);
  const std::vector<float> emu = testing::run(*emulated_nvfp4(w, DType::BF16), xa, 19, 33, DType::BF16, pool);
  EXPECT_EQ(native, emu);
}

}  // namespace
}  // namespace fp4lm::kernels::amx_kernels_test
