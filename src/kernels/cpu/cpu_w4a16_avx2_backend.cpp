// Registration of the `cpu_w4a16_avx2` Linear and MoE backends: NVFP4 weights, 16-bit activations (never quantized). Matches on the weight key alone, so it also serves W4A4 layers under --override-activation-dtype or when forced.
// Kernels: nvfp4_w4a16_avx2.cpp; ISA-neutral wrapper: nvfp4_linear.cpp, moe_grouped.cpp.
#include "kernels/backend.h"
#include "kernels/cpu/cpu_avx2_support.h"
#include "kernels/cpu/moe_grouped.h"
#include "kernels/cpu/nvfp4_linear.h"

namespace fp4lm::kernels {

const Backend& cpu_w4a16_avx2_linear_backend() {
  static const Backend b = [] {
    Backend b;
    b.name = "cpu_w4a16_avx2";
    b.kind = LayerKind::linear;
    b.schemes = {kNvfp4W4A16};
    b.weight_key_only = true;
    b.act_dtypes = {DType::F32, DType::BF16, DType::F16};
    b.unavailable_reason = cpu::avx2_unavailable_reason;
    b.check_linear = cpu::check_nvfp4_linear;
    b.make_linear = [](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<LinearKernel> {
      return std::make_unique<cpu::Nvfp4Linear>(std::move(w), p, cpu::Nvfp4Mode::w4a16);
    };
    return b;
  }();
  return b;
}

const Backend& cpu_w4a16_avx2_moe_backend() {
  static const Backend b = [] {
    Backend b;
    b.name = "cpu_w4a16_avx2";
    b.kind = LayerKind::moe;
    b.schemes = {kNvfp4W4A16};
    b.weight_key_only = true;
    b.act_dtypes = {DType::F32, DType::BF16, DType::F16};
    b.unavailable_reason = cpu::avx2_unavailable_reason;
    b.check_moe = cpu::check_nvfp4_moe;
    b.make_moe = [](MoeWeights w, const MoeProblem& p) -> std::unique_ptr<MoeKernel> {
      return std::make_unique<cpu::GroupedMoe>(
          std::move(w), p, [](LinearWeights lw, const LinearProblem& lp) -> std::unique_ptr<cpu::RowSplitLinear> {
            return std::make_unique<cpu::Nvfp4Linear>(std::move(lw), lp, cpu::Nvfp4Mode::w4a16);
          });
    };
    return b;
  }();
  return b;
}

}  // namespace fp4lm::kernels
