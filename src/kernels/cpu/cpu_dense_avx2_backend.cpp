// Registration of the `cpu_dense_avx2` Linear and MoE backends: unquantized F32/BF16/F16 weights
// (lm_head, routers, excluded layers, unquantized experts), activations F32/BF16/F16.
// Kernel: dense_avx2.cpp; wrapper: dense_linear.cpp; MoE: moe_grouped.cpp.
#include <fmt/format.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_avx2_support.h"
#include "kernels/cpu/dense_linear.h"
#include "kernels/cpu/moe_grouped.h"

namespace fp4lm::kernels {

const Backend& cpu_dense_avx2_linear_backend() {
  static const Backend b = [] {
    Backend b;
    b.name = "cpu_dense_avx2";
    b.kind = LayerKind::linear;
    b.schemes = {kUnquantized};
    b.act_dtypes = {DType::F32, DType::BF16, DType::F16};
    b.unavailable_reason = cpu::avx2_unavailable_reason;
    b.check_linear = [](const LinearProblem& p) -> std::string {
      if (p.n <= 0 || p.k <= 0) return fmt::format("shape [{}, {}]: needs n > 0 and k > 0", p.n, p.k);
      return "";
    };
    b.make_linear = [](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<LinearKernel> {
      return std::make_unique<cpu::DenseLinear>(std::move(w), p);
    };
    return b;
  }();
  return b;
}

const Backend& cpu_dense_avx2_moe_backend() {
  static const Backend b = [] {
    Backend b;
    b.name = "cpu_dense_avx2";
    b.kind = LayerKind::moe;
    b.schemes = {kUnquantized};
    b.act_dtypes = {DType::F32, DType::BF16, DType::F16};
    b.unavailable_reason = cpu::avx2_unavailable_reason;
    b.check_moe = [](const MoeProblem& p) -> std::string {
      if (p.hidden <= 0 || p.inter <= 0 || p.num_experts <= 0)
        return fmt::format("hidden {} / intermediate {} / {} experts: all need to be positive",
                           p.hidden, p.inter, p.num_experts);
      return "";
    };
    b.make_moe = [](MoeWeights w, const MoeProblem& p) -> std::unique_ptr<MoeKernel> {
      return std::make_unique<cpu::GroupedMoe>(
          std::move(w), p, [](LinearWeights lw, const LinearProblem& lp) -> std::unique_ptr<cpu::RowSplitLinear> {
            return std::make_unique<cpu::DenseLinear>(std::move(lw), lp);
          });
    };
    return b;
  }();
  return b;
}

}  // namespace fp4lm::kernels
