// Registration of the `cpu_fp8_w8a16_avx512` Linear and MoE backends (FP8 W8A16, as the AVX2
// ones in avx2/fp8_backends.cpp): kernel avx512/fp8_w8a16.cpp, table fp8_tables.cpp.
#include "kernels/cpu/backend_factory.h"

namespace fp4lm::kernels {

namespace {
constexpr IsaNeeds kNeeds{Isa::avx512, kAvx512Features.with({CpuFeature::avx512vbmi, CpuFeature::avx512bf16})};
}  // namespace

const Backend& cpu_fp8_w8a16_avx512_linear_backend() {
  static const Backend b =
      cpu::fp8_cpu_backend("cpu_fp8_w8a16_avx512", LayerKind::linear, cpu::fp8_kernels_avx512(),
                             cpu::fp8_block_kernels_avx512(), kNeeds);
  return b;
}
const Backend& cpu_fp8_w8a16_avx512_moe_backend() {
  static const Backend b = cpu::fp8_cpu_backend("cpu_fp8_w8a16_avx512", LayerKind::moe, cpu::fp8_kernels_avx512(),
                             cpu::fp8_block_kernels_avx512(), kNeeds);
  return b;
}

}  // namespace fp4lm::kernels
