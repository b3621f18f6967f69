#include "kernels/cpu/fp8_linear.h"

#include "core/error.h"

namespace fp4lm::kernels::cpu {

namespace {
struct Fp8PreparedInput final : PreparedInput {
  Fp8Input in;
};
}  // namespace

Fp8Linear::Fp8Linear(LinearWeights w, const LinearProblem& p, const Fp8Kernels& isa)
    : RowSplitLinear(w.n), w_(prepare_fp8_matrix(std::move(w))), act_(p.act_dtype), isa_(isa) {
  if (act_ != DType::F32 && act_ != DType::BF16 && act_ != DType::F16)
    fail("FP8 CPU kernel: activation dtype {} is not float32, bfloat16 or float16", dtype_torch_name(act_));
  if (!isa_.rows) fail("FP8 CPU kernel: the {} kernels were not built", isa_.isa);
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
  isa_.rows(w_, x, r0, r1, y, act_);
}

const Fp8Kernels& fp8_kernels_avx2() {
  static constexpr Fp8Kernels kTable{"avx2", fp8_w8a16_rows_avx2};
  return kTable;
}

const Fp8Kernels& fp8_kernels_avx512() {
#ifdef FP4LM_HAVE_AVX512_KERNELS
  static constexpr Fp8Kernels kTable{"avx512", fp8_w8a16_rows_avx512};
#else
  static constexpr Fp8Kernels kTable{"avx512", nullptr};
#endif
  return kTable;
}

}  // namespace fp4lm::kernels::cpu
