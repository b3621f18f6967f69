// The AMX kernel bodies on the scalar tile emulation (portable): the tables the tests run on
// every CPU, and the table entries the native tables share (amx_kernels.h).
#include "kernels/cpu/amx_dense_rows.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/amx_kernels.h"
#include "kernels/cpu/amx_tile_emulation.h"

namespace fp4lm::kernels::cpu {

namespace amx {

std::unique_ptr<PreparedInput> a16_input(const void* x, DType act, int64_t m, int64_t k, ThreadPool&) {
  return make_amx_input(x, act, m, k);
}

int64_t row_block(int64_t, int64_t) { return 2 * kPanelRows; }

}  // namespace amx

namespace {

void nvfp4_rows_emulated(const Nvfp4Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  amx::nvfp4_w4a16_rows<amx::EmulatedTiles>(w, in, r0, r1, y, act);
}

std::unique_ptr<PreparedInput> dense_input_emulated(const void* x, DType act, int64_t m, int64_t k) {
  return amx::make_amx_input(x, act, m, k);
}

void dense_rows_emulated(const DenseMatrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  amx::dense_rows<amx::EmulatedTiles>(w, in, r0, r1, y, act, nullptr);
}

}  // namespace

const Nvfp4Kernels& nvfp4_kernels_amx_emulated() {
  static const Nvfp4Kernels t{"amx (emulated)", amx::a16_input, amx::row_block, nvfp4_rows_emulated,
                              nullptr,          nullptr,        nullptr};
  return t;
}

const DenseKernels& dense_kernels_amx_emulated() {
  static const DenseKernels t{"amx (emulated)", dense_input_emulated, amx::row_block, dense_rows_emulated};
  return t;
}

}  // namespace fp4lm::kernels::cpu
