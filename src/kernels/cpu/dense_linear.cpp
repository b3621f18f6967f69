#include "kernels/cpu/dense_linear.h"

#include "core/error.h"

namespace fp4lm::kernels::cpu {

DenseLinear::DenseLinear(LinearWeights w, const LinearProblem& p, const DenseKernels& isa)
    : RowSplitLinear(w.n), w_(prepare_dense_matrix(std::move(w))), act_(p.act_dtype), isa_(isa) {
  if (act_ != DType::F32 && act_ != DType::BF16 && act_ != DType::F16)
    fail("dense CPU kernel: activation dtype {} is not float32, bfloat16 or float16",
         dtype_torch_name(act_));
  if (p.n != w_.n || p.k != w_.k)
    fail("dense CPU kernel: problem shape [{}, {}] differs from the weights' [{}, {}]", p.n, p.k,
         w_.n, w_.k);
}

int64_t DenseLinear::row_block(int64_t m) const { return isa_.row_block(m); }

std::unique_ptr<PreparedInput> DenseLinear::prepare(const void* x, int64_t m, bool, ThreadPool&) const {
  if (m < 0) fail("dense CPU kernel: negative token count {}", m);
  return isa_.input(x, act_, m, w_.k);
}

void DenseLinear::run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const {
  isa_.rows(w_, in, r0, r1, y, act_);
}

}  // namespace fp4lm::kernels::cpu
