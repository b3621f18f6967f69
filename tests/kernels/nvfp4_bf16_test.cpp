// NVFP4 weights as exact bf16 (src/kernels/cpu/nvfp4_bf16.h): E2M1 × E4M3 block scale for every
// code and every non-NaN scale byte (subnormal scales, 0, the largest 448, negative scales) is a
// bf16 exactly; and the AVX-512 W4A16 kernels give exactly these values as a weight's
// contribution in each of their schedules (register, panel, GEMM): with one-hot activations and a
// global scale of 1 each output is one weight.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernel_test_support.h"
#include "kernels/cpu/nvfp4_bf16.h"
#include "kernels/registry.h"

namespace fp4lm::kernels::nvfp4_bf16_test {
namespace {

float bf16_value(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(Nvfp4Bf16, ExactForEveryCodeAndScaleByte) {
  int checked = 0;
  for (int s = 0; s < 256; ++s) {
    if ((s & 0x7f) == 0x7f) continue;  // the E4M3 NaN bytes, rejected at load
    for (int c = 0; c < 16; ++c) {
      const double exact = static_cast<double>(e2m1_to_f32(static_cast<uint8_t>(c))) *
                           static_cast<double>(e4m3_to_f32(static_cast<uint8_t>(s)));
      const uint16_t b = cpu::nvfp4_weight_bf16(static_cast<uint8_t>(c), static_cast<uint8_t>(s));
      ASSERT_EQ(static_cast<double>(bf16_value(b)), exact) << "code " << c << " scale byte " << s;
      // Nonzero products stay normal in bf16 (vdpbf16ps treats bf16 denormals as zero).
      if (exact != 0.0) {
        EXPECT_NE(b & 0x7f80, 0) << "code " << c << " scale byte " << s;
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 254 * 16);
  // The extremes: 6 × 448 and 0.5 × the smallest subnormal scale 2^-9.
  EXPECT_EQ(bf16_value(cpu::nvfp4_weight_bf16(7, 0x7E)), 2688.0f);
  EXPECT_EQ(bf16_value(cpu::nvfp4_weight_bf16(1, 0x01)), 0x1p-10f);
  EXPECT_EQ(bf16_value(cpu::nvfp4_weight_bf16(15, 0xFE)), 2688.0f);  // (-6) × (-448)
}

// 16 rows × 256: row r's block b has scale byte 16r + b (NaN bytes replaced by 0x7E / 0xFE) and
// element j of every block code j, so the layer holds every (code, scale byte) pair; global 1.
struct AllPairsLayer {
  std::shared_ptr<testing::TestLayer> layer;
  LinearWeights w;
};
AllPairsLayer all_pairs_layer() {
  AllPairsLayer a;
  a.layer = testing::make_layer({16, 256, {16}, false, kNvfp4W4A16, 7});
  quant::Nvfp4Weight& q = a.layer->shards[0];
  for (int r = 0; r < 16; ++r) {
    for (int b = 0; b < 16; ++b) {
      const int s = 16 * r + b;
      q.scales[static_cast<size_t>(r * 16 + b)] = static_cast<uint8_t>((s & 0x7f) == 0x7f ? s - 1 : s);
      for (int j = 0; j < 16; j += 2)
        q.codes[static_cast<size_t>(r * 128 + b * 8 + j / 2)] = static_cast<uint8_t>(j | ((j + 1) << 4));
    }
  }
  WeightShard& sh = a.layer->weights.shards[0];
  sh.view = Nvfp4View{q.codes.data(), q.scales.data(), 1.0f, 1.0f};
  a.w = testing::weights_of(a.layer);
  return a;
}

uint8_t code_at(const quant::Nvfp4Weight& q, int64_t r, int64_t j) {
  const uint8_t byte = q.codes[static_cast<size_t>(r * 128 + j / 2)];
  return static_cast<uint8_t>((j & 1) ? byte >> 4 : byte & 15);
}

TEST(Nvfp4Bf16, AvxW4a16KernelsDecodeExactlyTheseWeights) {
  const AllPairsLayer a = all_pairs_layer();
  const quant::Nvfp4Weight& q = a.layer->shards[0];
  ThreadPool pool(2);
  for (const char* backend : {"cpu_w4a16_avx512", "cpu_w4a16_avx512_gemm"}) {
    REQUIRE_BACKEND(backend, LayerKind::linear);
    auto kern = testing::make(backend, a.w, DType::F32);
    // m = 256 (GEMM, or the panel schedule), 20 (panel), 5 (register); token t one-hot at element 53t.
    for (int64_t m : {256, 20, 5}) {
      std::vector<float> x(static_cast<size_t>(m * 256), 0.0f);
      for (int64_t t = 0; t < m; ++t) x[static_cast<size_t>(t * 256 + (t * 53) % 256)] = 1.0f;
      const std::vector<float> y = testing::run(*kern, testing::to_act(x, DType::F32), m, 16, DType::F32, pool);
      for (int64_t t = 0; t < m; ++t) {
        const int64_t j = (t * 53) % 256;
        for (int64_t r = 0; r < 16; ++r) {
          const float want = bf16_value(cpu::nvfp4_weight_bf16(code_at(q, r, j), q.scales[static_cast<size_t>(r * 16 + j / 16)]));
          ASSERT_EQ(y[static_cast<size_t>(t * 16 + r)], want) << backend << " m=" << m << " row " << r << " element " << j;
        }
      }
    }
  }
}

}  // namespace
}  // namespace fp4lm::kernels::nvfp4_bf16_test
