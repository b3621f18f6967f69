// Registration of the `cpu_dense_avx2` Linear and MoE backends: unquantized F32/BF16/F16 weights
// (lm_head, routers, excluded layers, unquantized experts), activations F32/BF16/F16.
// Kernel: avx2/dense.cpp (table: avx2/dense_table.cpp); wrapper: DenseLinear (dense_kernels.h).
#include "kernels/cpu/backend_factory.h"

namespace fp4lm::kernels {

namespace {
constexpr IsaNeeds kNeeds{Isa::avx2, kAvx2Features};
}  // namespace

const Backend& cpu_dense_avx2_linear_backend() {
  static const Backend b =
      cpu::dense_cpu_backend("cpu_dense_avx2", LayerKind::linear, cpu::dense_kernels_avx2(), kNeeds);
  return b;
}

const Backend& cpu_dense_avx2_moe_backend() {
  static const Backend b = cpu::dense_cpu_backend("cpu_dense_avx2", LayerKind::moe, cpu::dense_kernels_avx2(), kNeeds);
  return b;
}

}  // namespace fp4lm::kernels
