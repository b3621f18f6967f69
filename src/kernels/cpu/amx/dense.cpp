// The dense AMX table: BF16 weight rows by amx_gemm.h's body on the tile instructions, F32/F16
// weight rows (bf16 cannot hold them) by the AVX-512 kernel in the same call (the prepared input
// holds both forms of x). Built with -mamx-tile -mamx-bf16 and the AVX-512 flags.
#include "kernels/cpu/amx/tiles_native.h"
#include "kernels/cpu/amx_dense_rows.h"
#include "kernels/cpu/amx_kernels.h"

namespace fp4lm::kernels::cpu {

namespace {

std::unique_ptr<PreparedInput> input(const void* x, DType act, int64_t m, int64_t k) {
  auto in = amx::make_amx_input(x, act, m, k);
  in->fallback = dense_kernels_avx512().input(x, act, m, k);
  return in;
}

void rows(const DenseMatrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  amx::dense_rows<amx::NativeTiles>(w, in, r0, r1, y, act, &dense_kernels_avx512());
}

}  // namespace

const DenseKernels& dense_kernels_amx() {
  static const DenseKernels t{"amx", input, amx::row_block, rows};
  return t;
}

}  // namespace fp4lm::kernels::cpu
