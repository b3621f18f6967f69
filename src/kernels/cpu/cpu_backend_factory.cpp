#include "kernels/cpu/cpu_backend_factory.h"

#include <fmt/format.h>

#include "kernels/cpu/cpu_isa_support.h"
#include "kernels/cpu/dense_linear.h"
#include "kernels/cpu/moe_grouped.h"

namespace fp4lm::kernels::cpu {

Backend nvfp4_cpu_backend(std::string name, LayerKind kind, Nvfp4Mode mode, const Nvfp4Kernels& isa,
                          std::function<std::string()> unavailable_reason) {
  const bool w4a16 = mode == Nvfp4Mode::w4a16;
  Backend b;
  b.name = std::move(name);
  b.kind = kind;
  b.schemes = {w4a16 ? kNvfp4W4A16 : kNvfp4W4A4};
  b.weight_key_only = w4a16;
  b.act_dtypes = {DType::F32, DType::BF16, DType::F16};
  b.unavailable_reason = std::move(unavailable_reason);
  const Nvfp4Kernels* table = &isa;
  auto make = [mode, table](LinearWeights w, const LinearProblem& p) {
    return std::make_unique<Nvfp4Linear>(std::move(w), p, mode, *table);
  };
  if (kind == LayerKind::linear) {
    b.check_linear = check_nvfp4_linear;
    b.make_linear = [make](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<LinearKernel> {
      return make(std::move(w), p);
    };
  } else {
    b.check_moe = check_nvfp4_moe;
    b.make_moe = [make](MoeWeights w, const MoeProblem& p) -> std::unique_ptr<MoeKernel> {
      return std::make_unique<GroupedMoe>(
          std::move(w), p, [make](LinearWeights lw, const LinearProblem& lp) -> std::unique_ptr<RowSplitLinear> {
            return make(std::move(lw), lp);
          });
    };
  }
  return b;
}

Backend dense_cpu_backend(std::string name, LayerKind kind, const DenseKernels& isa,
                          std::function<std::string()> unavailable_reason) {
  Backend b;
  b.name = std::move(name);
  b.kind = kind;
  b.schemes = {kUnquantized};
  b.act_dtypes = {DType::F32, DType::BF16, DType::F16};
  b.unavailable_reason = std::move(unavailable_reason);
  const DenseKernels* table = &isa;
  auto make = [table](LinearWeights w, const LinearProblem& p) {
    return std::make_unique<DenseLinear>(std::move(w), p, *table);
  };
  if (kind == LayerKind::linear) {
    b.check_linear = [](const LinearProblem& p) -> std::string {
      if (p.n <= 0 || p.k <= 0) return fmt::format("shape [{}, {}]: needs n > 0 and k > 0", p.n, p.k);
      return "";
    };
    b.make_linear = [make](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<LinearKernel> {
      return make(std::move(w), p);
    };
  } else {
    b.check_moe = [](const MoeProblem& p) -> std::string {
      if (p.hidden <= 0 || p.inter <= 0 || p.num_experts <= 0)
        return fmt::format("hidden {} / intermediate {} / {} experts: all need to be positive",
                           p.hidden, p.inter, p.num_experts);
      return "";
    };
    b.make_moe = [make](MoeWeights w, const MoeProblem& p) -> std::unique_ptr<MoeKernel> {
      return std::make_unique<GroupedMoe>(
          std::move(w), p, [make](LinearWeights lw, const LinearProblem& lp) -> std::unique_ptr<RowSplitLinear> {
            return make(std::move(lw), lp);
          });
    };
  }
  return b;
}

}  // namespace fp4lm::kernels::cpu
