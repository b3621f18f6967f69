// The AVX-VNNI W4A16 and W4A4 row loops (avxvnni/) against the AVX2 ones they replace on CPUs
// with AVX-VNNI: the int32 sums are exact both ways, so every output must be the same bits. The
// CPUs these tests have run on lack AVX-VNNI, so the same source is also compiled with the EVEX
// vpdpwssd / vpdpbusd of AVX512-VNNI + VL (avx512/*_vnni_twin.cpp) and held to the same bits
// wherever that can run. On a CPU with AVX-VNNI every cpu_w4a16_avx2 / cpu_w4a4_avx2 test runs the
// variants too (the AVX2 table picks them there).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernel_test_support.h"
#include "kernels/cpu/avx2/nvfp4.h"
#include "kernels/cpu/nvfp4_matrix.h"
#include "kernels/isa.h"

namespace fp4lm::kernels::nvfp4_avx_vnni_test {
namespace {

// Which VNNI loops can run here: the AVX-VNNI ones (VEX) and their EVEX twins; `why` collects the
// reasons of those that cannot.
struct VnniLoops {
  bool vex = false, evex = false;
  std::string why;
};
VnniLoops runnable_vnni_loops() {
  VnniLoops l;
#ifdef FP4LM_HAVE_AVXVNNI_KERNELS
  const std::string vex = isa_unavailable_reason(
      {Isa::avx2, {CpuFeature::avx2, CpuFeature::fma, CpuFeature::f16c, CpuFeature::avx_vnni}});
  l.vex = vex.empty();
  if (!l.vex) l.why += "avx-vnni: " + vex + "; ";
#else
  l.why += "avx-vnni: the compiler lacks -mavxvnni; ";
#endif
#ifdef FP4LM_HAVE_AVX512_KERNELS
  const std::string evex = isa_unavailable_reason({Isa::avx512,
                                                   {CpuFeature::avx2, CpuFeature::fma, CpuFeature::f16c,
                                                    CpuFeature::avx512f, CpuFeature::avx512vl, CpuFeature::avx512vnni}});
  l.evex = evex.empty();
  if (!l.evex) l.why += "evex twin: " + evex;
#else
  l.why += "evex twin: built without the AVX-512 kernels";
#endif
  return l;
}

template <class Rows>
using RowsFn = void (*)(const Rows&, int64_t, int64_t, void*, DType);

template <class Rows>
std::vector<std::pair<std::string, RowsFn<Rows>>> loops_of(const VnniLoops& l, RowsFn<Rows> vex, RowsFn<Rows> evex) {
  std::vector<std::pair<std::string, RowsFn<Rows>>> loops;
  if (l.vex) loops.emplace_back("avx-vnni", vex);
  if (l.evex) loops.emplace_back("evex twin", evex);
  return loops;
}

// Magnitudes over 2^-spread..2^spread, so that blocks take different exponents and scales.
std::vector<float> spread_activations(int64_t m, int64_t k, uint32_t seed, int spread) {
  std::vector<float> x = testing::make_activations(m, k, seed);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = std::ldexp(x[i], static_cast<int>((i * 7919) % (2 * spread + 1)) - spread);
  return x;
}

// Runs `loops` and the AVX2 loop over rows [0, 13) and [13, n) (as two threads would) and
// compares every output byte; returns the number of comparisons.
template <class Rows>
int expect_same_bits(const std::vector<std::pair<std::string, RowsFn<Rows>>>& loops, RowsFn<Rows> avx2,
                     const Rows& a, int64_t n, int64_t m, DType act) {
  const size_t bytes = static_cast<size_t>(m * n) * dtype_size(act);
  std::vector<uint8_t> want(bytes), got(bytes);
  avx2(a, 0, 13, want.data(), act);
  avx2(a, 13, n, want.data(), act);
  EXPECT_NE(want, std::vector<uint8_t>(bytes, 0));
  int compared = 0;
  for (const auto& [name, rows] : loops) {
    std::memset(got.data(), 0xAB, bytes);
    rows(a, 0, 13, got.data(), act);
    rows(a, 13, n, got.data(), act);
    EXPECT_EQ(want, got) << name;
    ++compared;
  }
  return compared;
}

TEST(Nvfp4W4a16Vnni, SameBitsAsTheAvx2RowLoop) {
  REQUIRE_AVX2();
  const VnniLoops l = runnable_vnni_loops();
  const auto loops = loops_of<cpu::W4a16Rows>(l, cpu::nvfp4_w4a16_rows_avxvnni, cpu::nvfp4_w4a16_rows_vnni_twin);
  if (loops.empty()) GTEST_SKIP() << "no AVX-VNNI loop can run here: " << l.why;
  ThreadPool pool(2);
  uint32_t seed = 700;
  int compared = 0;
  for (int64_t k : {int64_t{16}, int64_t{48}, int64_t{272}, int64_t{1040}, int64_t{4096}}) {
    for (int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{9}, int64_t{17}}) {
      for (DType act : {DType::BF16, DType::F16, DType::F32}) {  // F32: two int16 pieces
        SCOPED_TRACE("k=" + std::to_string(k) + " m=" + std::to_string(m) + " " + std::string(dtype_name(act)));
        const int64_t n = 37;
        auto layer = testing::make_layer({n, k, {20, 17}, m % 2 == 1, kNvfp4W4A16, seed++});
        const cpu::Nvfp4Matrix w = cpu::prepare_nvfp4_matrix(testing::weights_of(layer), false);
        const std::vector<uint8_t> xa =
            testing::to_act(spread_activations(m, k, seed++, act == DType::F16 ? 10 : 20), act);
        const cpu::W4a16Input in = cpu::nvfp4_w4a16_input_avx2(xa.data(), act, m, k, pool);
        compared += expect_same_bits(loops, cpu::nvfp4_w4a16_rows_avx2, cpu::w4a16_rows_of(w, in), n, m, act);
      }
    }
  }
  EXPECT_EQ(compared, 5 * 7 * 3 * static_cast<int>(loops.size()));
}

// The same for the W4A4 loop (two vpdpbusd per chunk and token), static and per-token scales.
TEST(Nvfp4W4a4Vnni, SameBitsAsTheAvx2RowLoop) {
  REQUIRE_AVX2();
  const VnniLoops l = runnable_vnni_loops();
  const auto loops = loops_of<cpu::W4a4Rows>(l, cpu::nvfp4_w4a4_rows_avxvnni, cpu::nvfp4_w4a4_rows_vnni_twin);
  if (loops.empty()) GTEST_SKIP() << "no AVX-VNNI loop can run here: " << l.why;
  ThreadPool pool(2);
  uint32_t seed = 900;
  int compared = 0;
  for (int64_t k : {int64_t{16}, int64_t{48}, int64_t{272}, int64_t{1040}, int64_t{4096}}) {
    for (int64_t m : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{5}, int64_t{9}}) {
      for (bool dynamic : {false, true}) {
        SCOPED_TRACE("k=" + std::to_string(k) + " m=" + std::to_string(m) + (dynamic ? " dynamic" : " static"));
        const int64_t n = 37;
        auto layer = testing::make_layer({n, k, {20, 17}, m % 2 == 0, kNvfp4W4A4, seed++});
        const cpu::Nvfp4Matrix w = cpu::prepare_nvfp4_matrix(testing::weights_of(layer), true);
        const std::vector<uint8_t> xa = testing::to_act(spread_activations(m, k, seed++, 6), DType::BF16);
        const cpu::W4a4Input in = cpu::nvfp4_w4a4_input_avx2(
            xa.data(), DType::BF16, m, k, dynamic ? std::nullopt : std::optional<float>(w.input_scale), pool);
        compared += expect_same_bits(loops, cpu::nvfp4_w4a4_rows_avx2, cpu::w4a4_rows_of(w, in), n, m, DType::BF16);
      }
    }
  }
  EXPECT_EQ(compared, 5 * 5 * 2 * static_cast<int>(loops.size()));
}

}  // namespace
}  // namespace fp4lm::kernels::nvfp4_avx_vnni_test
