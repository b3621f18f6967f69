// Registration of the NVFP4 AVX2 Linear and MoE backends. Both run on the checkpoint's own
// codes and scales (nvfp4_matrix.h) and differ only in how activations enter:
//  - `cpu_w4a4_avx2`: run-time NVFP4 activations (W4A4), exactly (nvfp4_static, nvfp4_dynamic);
//    honours --a16-max-tokens.
//  - `cpu_w4a16_avx2`: 16-bit activations, never quantized. Matches on the weight key alone, so
//    it also serves W4A4 layers under --override-activation-dtype or when forced.
// Kernels: avx2/nvfp4_w4a4.cpp, avx2/nvfp4_w4a16.cpp (table: avx2/nvfp4_table.cpp).
#include "kernels/cpu/backend_factory.h"

namespace fp4lm::kernels {

namespace {
Backend avx2(LayerKind kind, cpu::Nvfp4Mode mode) {
  return cpu::nvfp4_cpu_backend(mode == cpu::Nvfp4Mode::w4a16 ? "cpu_w4a16_avx2" : "cpu_w4a4_avx2", kind,
                                mode, cpu::nvfp4_kernels_avx2(), IsaNeeds{Isa::avx2, kAvx2Features});
}
}  // namespace

const Backend& cpu_w4a4_avx2_linear_backend() {
  static const Backend b = avx2(LayerKind::linear, cpu::Nvfp4Mode::w4a4);
  return b;
}

const Backend& cpu_w4a4_avx2_moe_backend() {
  static const Backend b = avx2(LayerKind::moe, cpu::Nvfp4Mode::w4a4);
  return b;
}

const Backend& cpu_w4a16_avx2_linear_backend() {
  static const Backend b = avx2(LayerKind::linear, cpu::Nvfp4Mode::w4a16);
  return b;
}

const Backend& cpu_w4a16_avx2_moe_backend() {
  static const Backend b = avx2(LayerKind::moe, cpu::Nvfp4Mode::w4a16);
  return b;
}

}  // namespace fp4lm::kernels
