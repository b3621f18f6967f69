// The AVX2 W4A4 row loop with AVX-VNNI: two vpdpbusd per chunk and token in place of two
// vpmaddubsw, a vpaddw, a vpmaddwd and the correction's vpaddd; exact integers either way, so the same bits as
// nvfp4_w4a4_rows_avx2. Called by avx2/nvfp4_table.cpp only when the CPU has avx-vnni.
#define FP4LM_W4A4_DOT 1
#include "kernels/cpu/avx2/nvfp4_w4a4_rows.h"

namespace fp4lm::kernels::cpu {

void nvfp4_w4a4_rows_avxvnni(const W4a4Rows& a, int64_t r0, int64_t r1, void* y, DType act) {
  w4a4_rows(a, r0, r1, y, act);
}

}  // namespace fp4lm::kernels::cpu
