#include "kernels/cpu/nvfp4_linear.h"

#include "core/error.h"
#include "kernels/a16_scope.h"

namespace fp4lm::kernels::cpu {

namespace {
// Which of the table's kernels a call's input was prepared for.
struct Nvfp4Input final : PreparedInput {
  bool a4 = false;
  std::unique_ptr<PreparedInput> in;
};
}  // namespace

Nvfp4Linear::Nvfp4Linear(LinearWeights w, const LinearProblem& p, Nvfp4Mode mode, const Nvfp4Kernels& isa)
    : RowSplitLinear(w.n),
      w_(w.key.weight == WeightKey::mxfp4 ? prepare_mxfp4_as_nvfp4_matrix(std::move(w))
                                          : prepare_nvfp4_matrix(std::move(w), mode == Nvfp4Mode::w4a4)),
      p_(p),
      mode_(mode),
      isa_(isa) {
  if (p.act_dtype != DType::F32 && p.act_dtype != DType::BF16 && p.act_dtype != DType::F16)
    fail("NVFP4 CPU kernel: activation dtype {} is not float32, bfloat16 or float16",
         dtype_torch_name(p.act_dtype));
  if (p.n != w_.n || p.k != w_.k)
    fail("NVFP4 CPU kernel: problem shape [{}, {}] differs from the weights' [{}, {}]", p.n, p.k,
         w_.n, w_.k);
}

bool Nvfp4Linear::a16_for(int64_t m) const {
  if (mode_ != Nvfp4Mode::w4a4) return false;
  switch (A16Scope::current()) {
    case A16Choice::a16: return true;
    case A16Choice::a4: return false;
    case A16Choice::by_call_size: break;
  }
  return m <= p_.options.a16_max_tokens;
}

int64_t Nvfp4Linear::row_block(int64_t m) const {
  return mode_ == Nvfp4Mode::w4a4 && !a16_for(m) ? isa_.a4_row_block(m, w_.k) : isa_.a16_row_block(m, w_.k);
}

std::unique_ptr<PreparedInput> Nvfp4Linear::prepare(const void* x, int64_t m, bool force_a16,
                                                    ThreadPool& pool) const {
  if (m < 0) fail("NVFP4 CPU kernel: negative token count {}", m);
  auto in = std::make_unique<Nvfp4Input>();
  in->m = m;
  in->a4 = mode_ == Nvfp4Mode::w4a4 && !force_a16;
  const std::optional<float> input_scale =
      w_.per_token_input_scale ? std::nullopt : std::optional<float>(w_.input_scale);
  in->in = in->a4 ? isa_.a4_input(x, p_.act_dtype, m, w_.k, input_scale, pool)
                  : isa_.a16_input(x, p_.act_dtype, m, w_.k, pool);
  return in;
}

void Nvfp4Linear::run_rows(const PreparedInput& in, int64_t r0, int64_t r1, void* y) const {
  const auto& p = static_cast<const Nvfp4Input&>(in);
  if (p.a4)
    isa_.a4_rows(w_, *p.in, r0, r1, y, p_.act_dtype);
  else
    isa_.a16_rows(w_, *p.in, r0, r1, y, p_.act_dtype);
}

}  // namespace fp4lm::kernels::cpu
