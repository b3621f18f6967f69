// Registration of the `cpu_int4_w4a16_avx512` Linear and MoE backends: group-quantized int4 weights
// (GPTQ, AWQ, compressed-tensors pack-quantized, ModelOpt W4A16_AWQ) decoded in registers, 16-bit (or
// f32) activations never quantized, as vLLM's Marlin runs them. Kernel: avx512/int4_w4a16_bf16.cpp (any group);
// Linear: int4_linear.cpp; MoE: moe_grouped.cpp.
#include "kernels/cpu/backend_factory.h"

namespace fp4lm::kernels {

namespace {
constexpr IsaNeeds kNeeds = IsaNeeds{Isa::avx512, kAvx512Features};
}  // namespace

const Backend& cpu_int4_w4a16_avx512_linear_backend() {
  static const Backend b = cpu::int4_cpu_backend("cpu_int4_w4a16_avx512", LayerKind::linear, cpu::int4_kernels_avx512(), kNeeds);
  return b;
}
const Backend& cpu_int4_w4a16_avx512_moe_backend() {
  static const Backend b = cpu::int4_cpu_backend("cpu_int4_w4a16_avx512", LayerKind::moe, cpu::int4_kernels_avx512(), kNeeds);
  return b;
}

}  // namespace fp4lm::kernels
