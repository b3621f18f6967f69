// Registration of the AVX-512 CPU backends, ahead of the AVX2 ones in the oracle's table:
//  - `cpu_w4a16_avx512`: NVFP4 weights, 16-bit activations; vpermw decode to bf16, vdpbf16ps.
//  - `cpu_w4a4_avx512`: NVFP4 W4A4; vpermb decode, exact integer blocks by vpdpbusd.
//  - `cpu_dense_avx512`: unquantized weights; BF16 rows by vdpbf16ps (exact products), F32/F16
//    rows by the AVX2 kernel.
// Same prepared layout (the checkpoint's own), same ISA-neutral wrappers as AVX2; kernels in
// nvfp4_w4a16_avx512.cpp / nvfp4_w4a4_avx512.cpp (table: nvfp4_avx512_table.cpp).
// Each is available only when the CPU has every feature its kernels use (unavailable_reason
// names the missing ones) and the compiler built them.
#include <cstdlib>
#include <string_view>

#include "kernels/cpu/backend_factory.h"
#include "kernels/cpu/isa_support.h"

namespace fp4lm::kernels {

namespace {

// Not built, or switched off by FP4LM_DISABLE_ISA=avx512 (to compare with the AVX2 kernels
// end to end on the same machine).
std::string not_built() {
#ifdef FP4LM_HAVE_AVX512_KERNELS
  if (const char* off = std::getenv("FP4LM_DISABLE_ISA"); off && std::string_view(off) == "avx512")
    return "disabled by FP4LM_DISABLE_ISA=avx512";
  return "";
#else
  return "built without the AVX-512 kernels (the compiler lacks one of -mavx512{f,bw,vl,vbmi,vnni,bf16})";
#endif
}

// AVX2/FMA/F16C: conversions and the W4A4 activation quantizer are shared with the AVX2 kernels.
std::string w4a16_unavailable() {
  if (std::string why = not_built(); !why.empty()) return why;
  return cpu::cpu_lacks({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512bf16"});
}
std::string w4a4_unavailable() {
  if (std::string why = not_built(); !why.empty()) return why;
  return cpu::cpu_lacks({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vbmi", "avx512vnni"});
}

std::string dense_unavailable() {
  if (std::string why = not_built(); !why.empty()) return why;
  return cpu::cpu_lacks({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512bf16"});
}

Backend nvfp4(LayerKind kind, cpu::Nvfp4Mode mode) {
  const bool w4a16 = mode == cpu::Nvfp4Mode::w4a16;
  return cpu::nvfp4_cpu_backend(w4a16 ? "cpu_w4a16_avx512" : "cpu_w4a4_avx512", kind, mode, cpu::nvfp4_kernels_avx512(),
                                w4a16 ? w4a16_unavailable : w4a4_unavailable);
}

}  // namespace

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

const Backend& cpu_dense_avx512_linear_backend() {
  static const Backend b =
      cpu::dense_cpu_backend("cpu_dense_avx512", LayerKind::linear, cpu::dense_kernels_avx512(), dense_unavailable);
  return b;
}

const Backend& cpu_dense_avx512_moe_backend() {
  static const Backend b =
      cpu::dense_cpu_backend("cpu_dense_avx512", LayerKind::moe, cpu::dense_kernels_avx512(), dense_unavailable);
  return b;
}

}  // namespace fp4lm::kernels
