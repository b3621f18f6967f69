// The AVX-VNNI W4A16 row loop (avxvnni/nvfp4_w4a16.cpp) against the AVX2 one it replaces on CPUs
// with AVX-VNNI: the int32 sums are exact both ways, so every output must be the same bits. The
// CPUs these tests have run on lack AVX-VNNI, so the same source is also compiled with the EVEX
// vpdpwssd of AVX512-VNNI + VL (avx512/nvfp4_w4a16_vnni_twin.cpp) and held to the same bits
// wherever that can run. On a CPU with AVX-VNNI every cpu_w4a16_avx2 test runs the variant too
// (the AVX2 table picks it there).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernel_test_support.h"
#include "kernels/cpu/avx2/nvfp4.h"
#include "kernels/cpu/nvfp4_matrix.h"
#include "kernels/isa.h"

namespace fp4lm::kernels {
namespace {

using RowsFn = void (*)(const cpu::W4a16Rows&, int64_t, int64_t, void*, DType);

// The VNNI loops that can run here; `why` collects the reasons of those that cannot.
std::vector<std::pair<std::string, RowsFn>> runnable_vnni_loops(std::string& why) {
  std::vector<std::pair<std::string, RowsFn>> loops;
#ifdef FP4LM_HAVE_AVXVNNI_KERNELS
  const std::string vex = isa_unavailable_reason(
      {Isa::avx2, {CpuFeature::avx2, CpuFeature::fma, CpuFeature::f16c, CpuFeature::avx_vnni}});
  if (vex.empty()) loops.emplace_back("avx-vnni", cpu::nvfp4_w4a16_rows_avxvnni);
  else why += "avx-vnni: " + vex + "; ";
#else
  why += "avx-vnni: the compiler lacks -mavxvnni; ";
#endif
#ifdef FP4LM_HAVE_AVX512_KERNELS
  const std::string evex = isa_unavailable_reason({Isa::avx512,
                                                   {CpuFeature::avx2, CpuFeature::fma, CpuFeature::f16c,
                                                    CpuFeature::avx512f, CpuFeature::avx512vl, CpuFeature::avx512vnni}});
  if (evex.empty()) loops.emplace_back("evex twin", cpu::nvfp4_w4a16_rows_vnni_twin);
  else why += "evex twin: " + evex;
#else
  why += "evex twin: built without the AVX-512 kernels";
#endif
  return loops;
}

TEST(Nvfp4W4a16Vnni, SameBitsAsTheAvx2RowLoop) {
  REQUIRE_AVX2();
  std::string why;
  const auto loops = runnable_vnni_loops(why);
  if (loops.empty()) GTEST_SKIP() << "no AVX-VNNI loop can run here: " << why;
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
        // Magnitudes over 2^-20..2^20 (f16: 2^-10..2^10), so that blocks take different exponents.
        const int spread = act == DType::F16 ? 10 : 20;
        std::vector<float> x = testing::make_activations(m, k, seed++);
        for (size_t i = 0; i < x.size(); ++i)
          x[i] = std::ldexp(x[i], static_cast<int>((i * 7919) % (2 * spread + 1)) - spread);
        const std::vector<uint8_t> xa = testing::to_act(x, act);
        const cpu::W4a16Input in = cpu::nvfp4_w4a16_input_avx2(xa.data(), act, m, k, pool);
        const cpu::W4a16Rows a = cpu::w4a16_rows_of(w, in);
        const size_t bytes = static_cast<size_t>(m * n) * dtype_size(act);
        std::vector<uint8_t> want(bytes), got(bytes);
        cpu::nvfp4_w4a16_rows_avx2(a, 0, 13, want.data(), act);  // two row ranges, as two threads would
        cpu::nvfp4_w4a16_rows_avx2(a, 13, n, want.data(), act);
        ASSERT_NE(want, std::vector<uint8_t>(bytes, 0));
        for (const auto& [name, rows] : loops) {
          std::memset(got.data(), 0xAB, bytes);
          rows(a, 0, 13, got.data(), act);
          rows(a, 13, n, got.data(), act);
          EXPECT_EQ(want, got) << name;
          ++compared;
        }
      }
    }
  }
  EXPECT_EQ(compared, 5 * 7 * 3 * static_cast<int>(loops.size()));
}

}  // namespace
}  // namespace fp4lm::kernels
