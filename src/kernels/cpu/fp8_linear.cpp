#include "kernels/cpu/fp8_linear.h"

#include "core/error.h"

namespace fp4lm::kernels::cpu {

namespace {
struct Fp8PreparedInput final : PreparedInput {
  Fp8Input in;
};
}  // namespace

Fp8Linear::Fp8Linear(LinearWeights w, const LinearProblem& p, Fp8Isa isa)
    : RowSplitLinear(w.n), w_(prepare_fp8_matrix(std::move(w))), act_(p.act_dtype), isa_(isa) {
  if (act_ != DType::F32 && act_ != DType::BF16 && act_ != DType::F16)
    fail("FP8 CPU kernel: activation dtype {} is not float32, bfloat16 or float16", dtype_torch_name(act_));
  if (p.n != w_.n || p.k != w_.k)
    fail("FP8 CPU kernel: problem shape [{}, {}] differs from the weights' [{}, {}]", p.n, p.k, w_.n, w_.k);
}

int64_t Fp8Linear::row_block(int64_t) const { return kFp8RowBlock; }

std::unique_ptr<PreparedInput> Fp8Linear::prepare(const void* x, int64_t m, bool, ThreadPool&) const {
  if (m < 0) fail("FP8 CPU kernel: negative token count {}", m);
  auto in = std::make_unique<Fp8PreparedInput>();
  in->m = m;
  in->in = fp8_input(x, act_, m, w_.k);
  return in;
}

void Fp8Linear::run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const {
  const Fp8Input& x = static_cast<const Fp8PreparedInput&>(in).in;
  if (isa_ == Fp8Isa::avx512) fp8_w8a16_rows_avx512(w_, x, r0, r1, y, act_);
  else fp8_w8a16_rows_avx2(w_, x, r0, r1, y, act_);
}

}  // namespace fp4lm::kernels::cpu
