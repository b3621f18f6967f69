// Registration of the int8 W8A16 Linear and MoE backends `cpu_int8_w8a16_avx2`: int8 weights with
// a scale per output channel (ModelOpt W8A16 / W8A8_SQ_PER_CHANNEL) widened exactly in registers,
// activations used as they are. They match on the weight key alone: W8A8_SQ layers run here behind
// model::Linear's int8 activation pass (quantize-dequantize with the static input_scale; exact
// values, fp32 arithmetic), the reference backend runs them in one. Kernel: avx2/int8_w8a16.cpp;
// table: int8_tables.cpp; Linear: table_linear.h; MoE: moe_grouped.cpp.
#include "kernels/cpu/backend_factory.h"

namespace fp4lm::kernels {

namespace {
constexpr IsaNeeds kNeeds{Isa::avx2, kAvx2Features};
}  // namespace

const Backend& cpu_int8_w8a16_avx2_linear_backend() {
  static const Backend b = cpu::int8_cpu_backend("cpu_int8_w8a16_avx2", LayerKind::linear, cpu::int8_kernels_avx2(), kNeeds);
  return b;
}
const Backend& cpu_int8_w8a16_avx2_moe_backend() {
  static const Backend b = cpu::int8_cpu_backend("cpu_int8_w8a16_avx2", LayerKind::moe, cpu::int8_kernels_avx2(), kNeeds);
  return b;
}

}  // namespace fp4lm::kernels
