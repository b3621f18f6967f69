// The int8 W8A16 kernel table (ISA-neutral code: compiled without ISA flags): the call's input
// in fp32 and the adapter from the table's Fp8Matrix to the raw-pointer row kernel.
#include "kernels/cpu/int8_kernels.h"

namespace fp4lm::kernels::cpu {

namespace {

struct Fp32Input final : PreparedInput {
  Fp8Input in;
};

std::unique_ptr<PreparedInput> fp32_input(const void* x, DType act, int64_t m, int64_t k) {
  auto in = std::make_unique<Fp32Input>();
  in->m = m;
  in->in = fp8_input(x, act, m, k);
  return in;
}

void avx2_rows(const Fp8Matrix& w, const PreparedInput& pin, int64_t r0, int64_t r1, void* y, DType act) {
  const Fp8Input& x = static_cast<const Fp32Input&>(pin).in;
  const Fp8Rows rows{w.row_codes.data(), w.row_scale256.data(), w.bias.empty() ? nullptr : w.bias.data(), w.n, w.k};
  int8_w8a16_rows_avx2(rows, x.x.data(), x.kp, x.m, r0, r1, y, act);
}

}  // namespace

const Int8Kernels& int8_kernels_avx2() {
  static constexpr Int8Kernels kTable{"avx2", fp32_input, int8_w8a16_row_block_avx2, avx2_rows};
  return kTable;
}

}  // namespace fp4lm::kernels::cpu
