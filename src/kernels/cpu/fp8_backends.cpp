// Registration of the FP8 W8A16 Linear and MoE backends, `cpu_fp8_w8a16_avx2` and
// `cpu_fp8_w8a16_avx512`: E4M3 weights (per-tensor or per-channel weight_scale) decoded exactly
// in registers, 16-bit (or f32) activations never quantized — Marlin-FP8's semantics, as vLLM
// runs FP8 checkpoints on GPUs without FP8 compute. They match on the weight key alone, so they
// serve both FP8 W8A8 checkpoints (the oracle's default for them; the W8A8 emulation stays on
// `reference`) and weight-only FP8 layers. Kernels: fp8_w8a16_avx2.cpp, fp8_w8a16_avx512.cpp;
// tables: fp8_kernel_tables.cpp; Linear: table_linear.h; MoE: moe_grouped.cpp.
#include <cstdlib>
#include <string_view>

#include "kernels/cpu/backend_factory.h"
#include "kernels/cpu/isa_support.h"

namespace fp4lm::kernels {

namespace {

// As the NVFP4 AVX-512 backends: not built, or switched off by FP4LM_DISABLE_ISA=avx512.
std::string avx512_unavailable_reason() {
#ifdef FP4LM_HAVE_AVX512_KERNELS
  if (const char* off = std::getenv("FP4LM_DISABLE_ISA"); off && std::string_view(off) == "avx512")
    return "disabled by FP4LM_DISABLE_ISA=avx512";
  return cpu::cpu_lacks({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512vbmi", "avx512bf16"});
#else
  return "built without the AVX-512 kernels (the compiler lacks one of the -mavx512 flags)";
#endif
}

Backend fp8_backend(LayerKind kind, bool avx512) {
  if (avx512) return cpu::fp8_cpu_backend("cpu_fp8_w8a16_avx512", kind, cpu::fp8_kernels_avx512(), avx512_unavailable_reason);
  return cpu::fp8_cpu_backend("cpu_fp8_w8a16_avx2", kind, cpu::fp8_kernels_avx2(), cpu::avx2_unavailable_reason);
}

}  // namespace

const Backend& cpu_fp8_w8a16_avx512_linear_backend() {
  static const Backend b = fp8_backend(LayerKind::linear, true);
  return b;
}
const Backend& cpu_fp8_w8a16_avx512_moe_backend() {
  static const Backend b = fp8_backend(LayerKind::moe, true);
  return b;
}
const Backend& cpu_fp8_w8a16_avx2_linear_backend() {
  static const Backend b = fp8_backend(LayerKind::linear, false);
  return b;
}
const Backend& cpu_fp8_w8a16_avx2_moe_backend() {
  static const Backend b = fp8_backend(LayerKind::moe, false);
  return b;
}

}  // namespace fp4lm::kernels
