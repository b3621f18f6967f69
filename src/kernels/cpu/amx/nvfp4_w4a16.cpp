// The NVFP4 W4A16 AMX table: amx_gemm.h's body on the tile instructions (TDPBF16PS on weights
// decoded to exact bf16 panels). Built with -mamx-tile -mamx-bf16 and the AVX-512 flags.
#include "kernels/cpu/amx/tiles_native.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/amx_kernels.h"

namespace fp4lm::kernels::cpu {

namespace {
void rows(const Nvfp4Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  amx::nvfp4_w4a16_rows<amx::NativeTiles>(w, in, r0, r1, y, act);
}
}  // namespace

const Nvfp4Kernels& nvfp4_kernels_amx() {
  static const Nvfp4Kernels t{"amx", amx::a16_input, amx::row_block, rows, nullptr, nullptr, nullptr};
  return t;
}

}  // namespace fp4lm::kernels::cpu
