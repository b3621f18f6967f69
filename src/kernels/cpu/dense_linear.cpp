#include "kernels/cpu/dense_linear.h"

#include "core/error.h"
#include "kernels/cpu/dense_avx2.h"

namespace fp4lm::kernels::cpu {

namespace {
struct DenseInput final : PreparedInput {
  std::vector<float> xp;
};
}  // namespace

DenseLinear::DenseLinear(LinearWeights w, const LinearProblem& p)
    : RowSplitLinear(w.n), w_(prepare_dense_matrix(std::move(w))), act_(p.act_dtype) {
  if (act_ != DType::F32 && act_ != DType::BF16 && act_ != DType::F16)
    fail("dense CPU kernel: activation dtype {} is not float32, bfloat16 or float16",
         dtype_torch_name(act_));
  if (p.n != w_.n || p.k != w_.k)
    fail("dense CPU kernel: problem shape [{}, {}] differs from the weights' [{}, {}]", p.n, p.k,
         w_.n, w_.k);
}

int64_t DenseLinear::row_block(int64_t) const { return kDenseRowBlock; }

std::unique_ptr<PreparedInput> DenseLinear::prepare(const void* x, int64_t m, bool, ThreadPool&) const {
  auto in = std::make_unique<DenseInput>();
  in->m = m;
  in->xp = dense_input(x, act_, m, w_.k);
  return in;
}

void DenseLinear::run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const {
  dense_rows_avx2(w_, static_cast<const DenseInput&>(in).xp.data(), in.m, r0, r1, y, act_);
}

}  // namespace fp4lm::kernels::cpu
