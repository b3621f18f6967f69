// The AVX-VNNI W4A4 row loop's test twin: the same source (avx2/nvfp4_w4a4_rows.h) with EVEX
// vpdpbusd on 256-bit vectors (AVX512-VNNI + VL), compared bit for bit with the AVX2 loop in tests
// on AVX-512 CPUs without AVX-VNNI. Not used outside tests.
#define FP4LM_W4A4_DOT 2
#include "kernels/cpu/avx2/nvfp4_w4a4_rows.h"

namespace fp4lm::kernels::cpu {

void nvfp4_w4a4_rows_vnni_twin(const W4a4Rows& a, int64_t r0, int64_t r1, void* y, DType act) {
  w4a4_rows(a, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
