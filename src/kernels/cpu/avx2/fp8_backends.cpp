// Registration of the FP8 W8A16 Linear and MoE backends `cpu_fp8_w8a16_avx2` (and, in
// avx512/fp8_backends.cpp, `cpu_fp8_w8a16_avx512`): E4M3 weights (per-tensor or per-channel
// weight_scale) decoded exactly in registers, 16-bit (or f32) activations never quantized —
// Marlin-FP8's semantics, as vLLM runs FP8 checkpoints on GPUs without FP8 compute. They match
// on the weight key alone, so they serve both FP8 W8A8 checkpoints (the oracle's default for
// them; the W8A8 emulation stays on `reference`) and weight-only FP8 layers. Kernels:
// avx2/fp8_w8a16.cpp, avx512/fp8_w8a16.cpp; tables: fp8_tables.cpp; Linear: table_linear.h;
// MoE: moe_grouped.cpp.
#include "kernels/cpu/backend_factory.h"

namespace fp4lm::kernels {

namespace {
constexpr IsaNeeds kNeeds{Isa::avx2, kAvx2Features};
}  // namespace

const Backend& cpu_fp8_w8a16_avx2_linear_backend() {
  static const Backend b = cpu::fp8_cpu_backend("cpu_fp8_w8a16_avx2", LayerKind::linear, cpu::fp8_kernels_avx2(),
                             cpu::fp8_block_kernels_avx2(), kNeeds);
  return b;
}
const Backend& cpu_fp8_w8a16_avx2_moe_backend() {
  static const Backend b = cpu::fp8_cpu_backend("cpu_fp8_w8a16_avx2", LayerKind::moe, cpu::fp8_kernels_avx2(),
                             cpu::fp8_block_kernels_avx2(), kNeeds);
  return b;
}

}  // namespace fp4lm::kernels
