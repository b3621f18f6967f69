// Registration of the `cpu_dense_avx512` Linear and MoE backends: unquantized weights; BF16
// rows by vdpbf16ps (exact products; its two-FMA form without AVX512-BF16, so AVX-512 F/BW/VL
// suffice), F32/F16 rows by the AVX2 kernel. Kernel: avx512/dense.cpp (table: avx512/dense_table.cpp).
#include "kernels/cpu/backend_factory.h"

namespace fp4lm::kernels {

namespace {
constexpr IsaNeeds kNeeds{Isa::avx512, kAvx512Features};
}  // namespace

const Backend& cpu_dense_avx512_linear_backend() {
  static const Backend b =
      cpu::dense_cpu_backend("cpu_dense_avx512", LayerKind::linear, cpu::dense_kernels_avx512(), kNeeds);
  return b;
}

const Backend& cpu_dense_avx512_moe_backend() {
  static const Backend b =
      cpu::dense_cpu_backend("cpu_dense_avx512", LayerKind::moe, cpu::dense_kernels_avx512(), kNeeds);
  return b;
}

}  // namespace fp4lm::kernels
