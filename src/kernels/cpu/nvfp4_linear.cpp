#include "kernels/cpu/nvfp4_linear.h"

#include "core/error.h"
#include "kernels/cpu/nvfp4_avx2.h"

namespace fp4lm::kernels::cpu {

namespace {
struct A16Input final : PreparedInput {
  W4a16Input in;
};
struct A4Input final : PreparedInput {
  W4a4Input in;
};
}  // namespace

Nvfp4Linear::Nvfp4Linear(LinearWeights w, const LinearProblem& p, Nvfp4Mode mode)
    : RowSplitLinear(w.n), w_(prepare_nvfp4_matrix(std::move(w), mode == Nvfp4Mode::w4a4)), p_(p), mode_(mode) {
  if (p.act_dtype != DType::F32 && p.act_dtype != DType::BF16 && p.act_dtype != DType::F16)
    fail("NVFP4 CPU kernel: activation dtype {} is not float32, bfloat16 or float16",
         dtype_torch_name(p.act_dtype));
  if (p.n != w_.n || p.k != w_.k)
    fail("NVFP4 CPU kernel: problem shape [{}, {}] differs from the weights' [{}, {}]", p.n, p.k,
         w_.n, w_.k);
}

bool Nvfp4Linear::a16_for(int64_t m) const {
  return mode_ == Nvfp4Mode::w4a4 && m <= p_.options.a16_max_tokens;
}

int64_t Nvfp4Linear::row_block(int64_t m) const {
  return mode_ == Nvfp4Mode::w4a4 && m > p_.options.a16_max_tokens ? kNvfp4RowBlock
                                                                   : nvfp4_w4a16_row_block_avx2(m, w_.k);
}

std::unique_ptr<PreparedInput> Nvfp4Linear::prepare(const void* x, int64_t m, bool force_a16,
                                                    ThreadPool& pool) const {
  if (m < 0) fail("NVFP4 CPU kernel: negative token count {}", m);
  if (mode_ == Nvfp4Mode::w4a4 && !force_a16) {
    auto in = std::make_unique<A4Input>();
    in->m = m;
    in->in = nvfp4_w4a4_input_avx2(x, p_.act_dtype, m, w_.k, w_.input_scale, pool);
    return in;
  }
  auto in = std::make_unique<A16Input>();
  in->m = m;
  in->in = nvfp4_w4a16_input_avx2(x, p_.act_dtype, m, w_.k, pool);
  return in;
}

void Nvfp4Linear::run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const {
  if (const auto* a4 = dynamic_cast<const A4Input*>(&in))
    nvfp4_w4a4_rows_avx2(w_, a4->in, r0, r1, y, p_.act_dtype);
  else
    nvfp4_w4a16_rows_avx2(w_, static_cast<const A16Input&>(in).in, r0, r1, y, p_.act_dtype);
}

}  // namespace fp4lm::kernels::cpu
