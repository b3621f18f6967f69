// Registration of the `cpu_dense_avx2` Linear and MoE backends: unquantized F32/BF16/F16 weights
// (lm_head, routers, excluded layers, unquantized experts), activations F32/BF16/F16.
// Kernel: dense_avx2.cpp (table: dense_kernels_avx2.cpp); wrapper: dense_linear.cpp.
#include "kernels/cpu/backend_factory.h"
#include "kernels/cpu/isa_support.h"

namespace fp4lm::kernels {

const Backend& cpu_dense_avx2_linear_backend() {
  static const Backend b = cpu::dense_cpu_backend("cpu_dense_avx2", LayerKind::linear, cpu::dense_kernels_avx2(),
                                                  cpu::avx2_unavailable_reason);
  return b;
}

const Backend& cpu_dense_avx2_moe_backend() {
  static const Backend b = cpu::dense_cpu_backend("cpu_dense_avx2", LayerKind::moe, cpu::dense_kernels_avx2(),
                                                  cpu::avx2_unavailable_reason);
  return b;
}

}  // namespace fp4lm::kernels
