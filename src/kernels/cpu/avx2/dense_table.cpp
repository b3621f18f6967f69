// The AVX2 dense kernel table: adapters from the DenseKernels seam to dense.h.
#include "kernels/cpu/avx2/dense.h"
#include "kernels/cpu/dense_kernels.h"

namespace fp4lm::kernels::cpu {

namespace {

struct Fp32Input final : PreparedInput {
  std::vector<float> xp;
};

std::unique_ptr<PreparedInput> input(const void* x, DType act, int64_t m, int64_t k) {
  auto in = std::make_unique<Fp32Input>();
  in->m = m;
  in->xp = dense_input(x, act, m, k);
  return in;
}

int64_t row_block(int64_t, int64_t) { return kDenseRowBlock; }

void rows(const DenseMatrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  dense_rows_avx2(w, static_cast<const Fp32Input&>(in).xp.data(), in.m, r0, r1, y, act);
}

constexpr DenseKernels kTable{"avx2", input, row_block, rows};

}  // namespace

const DenseKernels& dense_kernels_avx2() { return kTable; }

}  // namespace fp4lm::kernels::cpu
