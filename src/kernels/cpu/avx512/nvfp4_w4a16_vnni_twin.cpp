// The AVX-VNNI W4A16 row loop's test twin: the same source (avx2/nvfp4_w4a16_rows.h) with the
// EVEX encoding of vpdpwssd on 256-bit vectors (AVX512-VNNI + VL), so that the loop runs, and is
// compared bit for bit with the AVX2 one, on AVX-512 CPUs without AVX-VNNI (none of the CPUs the
// tests have run on has AVX-VNNI). Not used outside tests: the AVX-512 kernels are faster there.
#define FP4LM_W4A16_DOT 2
#include "kernels/cpu/avx2/nvfp4_w4a16_rows.h"

namespace fp4lm::kernels::cpu {

void nvfp4_w4a16_rows_vnni_twin(const W4a16Rows& a, int64_t r0, int64_t r1, void* y, DType act) {
  w4a16_rows(a, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
