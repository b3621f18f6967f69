// The AVX2 W4A16 row loop with AVX-VNNI (Intel client CPUs from Alder Lake, which lack AVX-512):
// vpdpwssd adds each chunk's vpmaddwd products into the int32 sums in one op, so a chunk and token
// take 4 ops there instead of 7. Exact integers either way: the same bits as
// nvfp4_w4a16_rows_avx2 (docs/KERNELS.md, "W4A16 inner loop"). Called by avx2/nvfp4_table.cpp
// only when the CPU has avx-vnni.
#define FP4LM_W4A16_DOT 1
#include "kernels/cpu/avx2/nvfp4_w4a16_rows.h"

namespace fp4lm::kernels::cpu {

void nvfp4_w4a16_rows_avxvnni(const W4a16Rows& a, int64_t r0, int64_t r1, void* y, DType act) {
  w4a16_rows(a, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
