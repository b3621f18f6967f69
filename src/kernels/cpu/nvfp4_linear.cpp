#include "kernels/cpu/nvfp4_linear.h"

#include "core/error.h"
#include "kernels/cpu/nvfp4_avx2.h"

namespace fp4lm::kernels::cpu {

Nvfp4Linear::Nvfp4Linear(LinearWeights w, const LinearProblem& p, Nvfp4Mode mode)
    : w_(prepare_nvfp4_matrix(std::move(w), mode == Nvfp4Mode::w4a4)), p_(p), mode_(mode) {
  if (p.act_dtype != DType::F32 && p.act_dtype != DType::BF16 && p.act_dtype != DType::F16)
    fail("NVFP4 CPU kernel: activation dtype {} is not float32, bfloat16 or float16",
         dtype_torch_name(p.act_dtype));
  if (p.n != w_.n || p.k != w_.k)
    fail("NVFP4 CPU kernel: problem shape [{}, {}] differs from the weights' [{}, {}]", p.n, p.k,
         w_.n, w_.k);
}

Nvfp4Mode Nvfp4Linear::mode_for(int64_t m) const {
  if (mode_ == Nvfp4Mode::w4a4 && m <= p_.options.a16_max_tokens) return Nvfp4Mode::w4a16;
  return mode_;
}

void Nvfp4Linear::forward(const void* x, int64_t m, void* y, ThreadPool& pool) const {
  forward_with(mode_for(m), x, m, y, pool);
}

void Nvfp4Linear::forward_with(Nvfp4Mode mode, const void* x, int64_t m, void* y,
                               ThreadPool& pool) const {
  if (m < 0) fail("NVFP4 CPU kernel: negative token count {}", m);
  if (mode == Nvfp4Mode::w4a4) {
    if (mode_ != Nvfp4Mode::w4a4) fail("NVFP4 CPU kernel: W4A4 call on a W4A16 layer");
    nvfp4_w4a4_avx2(w_, x, p_.act_dtype, m, y, pool);
  } else {
    nvfp4_w4a16_avx2(w_, x, p_.act_dtype, m, y, pool);
  }
}

}  // namespace fp4lm::kernels::cpu
