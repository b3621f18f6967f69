// Registration of the NVFP4 AVX-512 CPU backends, ahead of the AVX2 ones in the oracle's table:
//  - `cpu_w4a16_avx512`: NVFP4 weights, 16-bit activations; vpermw decode to bf16, vdpbf16ps
//    (or its two-FMA form where the CPU lacks AVX512-BF16: Ice Lake).
//  - `cpu_w4a4_avx512`: NVFP4 W4A4; vpermb decode, exact integer blocks by vpdpbusd.
//  - `cpu_w4a16_avx512_gemm`, `cpu_w4a4_avx512_gemm`: the same bits, and from 64 / 24 tokens the
//    register-blocked GEMM kernels (avx512/nvfp4_w4a16_gemm.cpp, avx512/nvfp4_w4a4_gemm.cpp); each
//    ahead of its sibling.
// Same prepared layout (the checkpoint's own), same ISA-neutral wrappers as AVX2; kernels in
// avx512/nvfp4_w4a16.cpp / avx512/nvfp4_w4a4.cpp (table: avx512/nvfp4_table.cpp; conversions
// and the W4A4 activation quantizer are shared with the AVX2 kernels).
// Each is available only when the CPU has every feature its kernels use and the compiler built
// them (kernels/isa.h).
#include "kernels/cpu/backend_factory.h"

namespace fp4lm::kernels {

namespace {

// W4A16 needs no AVX512-BF16: without it the kernels run vdpbf16ps's two-FMA form (nvfp4.h).
constexpr IsaNeeds kW4a16{Isa::avx512, kAvx512Features};
constexpr IsaNeeds kW4a4{Isa::avx512, kAvx512Features.with({CpuFeature::avx512vbmi, CpuFeature::avx512vnni})};

Backend nvfp4(LayerKind kind, cpu::Nvfp4Mode mode) {
  const bool w4a16 = mode == cpu::Nvfp4Mode::w4a16;
  return cpu::nvfp4_cpu_backend(w4a16 ? "cpu_w4a16_avx512" : "cpu_w4a4_avx512", kind, mode, cpu::nvfp4_kernels_avx512(),
                                w4a16 ? kW4a16 : kW4a4);
}

// The W4A16 GEMM variant (avx512/nvfp4_w4a16_gemm.cpp): the same results as cpu_w4a16_avx512 for
// every m, the GEMM from 64 tokens; ahead of it in the oracle's table.
Backend nvfp4_gemm(LayerKind kind) {
  return cpu::nvfp4_cpu_backend("cpu_w4a16_avx512_gemm", kind, cpu::Nvfp4Mode::w4a16, cpu::nvfp4_kernels_avx512_gemm(),
                                kW4a16);
}

// The W4A4 GEMM variant (avx512/nvfp4_w4a4_gemm.cpp): cpu_w4a4_avx512's results for every m. Its
// W4A16 path (--a16-max-tokens) is the W4A16 GEMM table's, which runs without AVX512-BF16, so it
// needs what cpu_w4a4_avx512 needs.
Backend nvfp4_w4a4_gemm(LayerKind kind) {
  return cpu::nvfp4_cpu_backend("cpu_w4a4_avx512_gemm", kind, cpu::Nvfp4Mode::w4a4, cpu::nvfp4_kernels_avx512_gemm(),
                                kW4a4);
}

}  // namespace

const Backend& cpu_w4a4_avx512_gemm_linear_backend() {
  static const Backend b = nvfp4_w4a4_gemm(LayerKind::linear);
  return b;
}

const Backend& cpu_w4a4_avx512_gemm_moe_backend() {
  static const Backend b = nvfp4_w4a4_gemm(LayerKind::moe);
  return b;
}

const Backend& cpu_w4a16_avx512_gemm_linear_backend() {
  static const Backend b = nvfp4_gemm(LayerKind::linear);
  return b;
}

const Backend& cpu_w4a16_avx512_gemm_moe_backend() {
  static const Backend b = nvfp4_gemm(LayerKind::moe);
  return b;
}

const Backend& cpu_w4a4_avx512_linear_backend() {
  static const Backend b = nvfp4(LayerKind::linear, cpu::Nvfp4Mode::w4a4);
  return b;
}

const Backend& cpu_w4a4_avx512_moe_backend() {
  static const Backend b = nvfp4(LayerKind::moe, cpu::Nvfp4Mode::w4a4);
  return b;
}

const Backend& cpu_w4a16_avx512_linear_backend() {
  static const Backend b = nvfp4(LayerKind::linear, cpu::Nvfp4Mode::w4a16);
  return b;
}

const Backend& cpu_w4a16_avx512_moe_backend() {
  static const Backend b = nvfp4(LayerKind::moe, cpu::Nvfp4Mode::w4a16);
  return b;
}

}  // namespace fp4lm::kernels
