// Registration of the NVFP4 AVX2 Linear and MoE backends. Both run on the checkpoint's own
// codes and scales (nvfp4_matrix.h) and differ only in how activations enter:
//  - `cpu_w4a4_avx2`: run-time NVFP4 activations (W4A4), exactly (nvfp4_static, nvfp4_dynamic);
//    honours --a16-max-tokens.
//  - `cpu_w4a16_avx2`: 16-bit activations, never quantized. Matches on the weight key alone, so
//    it also serves W4A4 layers under --override-activation-dtype or when forced.
// Kernels: nvfp4_w4a4_avx2.cpp, nvfp4_w4a16_avx2.cpp; ISA-neutral wrappers: nvfp4_linear.cpp,
// moe_grouped.cpp.
#include "kernels/backend.h"
#include "kernels/cpu/cpu_avx2_support.h"
#include "kernels/cpu/moe_grouped.h"
#include "kernels/cpu/nvfp4_linear.h"

namespace fp4lm::kernels {

namespace {

Backend nvfp4_backend(LayerKind kind, cpu::Nvfp4Mode mode) {
  const bool w4a16 = mode == cpu::Nvfp4Mode::w4a16;
  Backend b;
  b.name = w4a16 ? "cpu_w4a16_avx2" : "cpu_w4a4_avx2";
  b.kind = kind;
  b.schemes = {w4a16 ? kNvfp4W4A16 : kNvfp4W4A4};
  b.weight_key_only = w4a16;
  b.act_dtypes = {DType::F32, DType::BF16, DType::F16};
  b.unavailable_reason = cpu::avx2_unavailable_reason;
  auto make = [mode](LinearWeights w, const LinearProblem& p) {
    return std::make_unique<cpu::Nvfp4Linear>(std::move(w), p, mode);
  };
  if (kind == LayerKind::linear) {
    b.check_linear = cpu::check_nvfp4_linear;
    b.make_linear = [make](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<LinearKernel> {
      return make(std::move(w), p);
    };
  } else {
    b.check_moe = cpu::check_nvfp4_moe;
    b.make_moe = [make](MoeWeights w, const MoeProblem& p) -> std::unique_ptr<MoeKernel> {
      return std::make_unique<cpu::GroupedMoe>(
          std::move(w), p, [make](LinearWeights lw, const LinearProblem& lp) -> std::unique_ptr<cpu::RowSplitLinear> {
            return make(std::move(lw), lp);
          });
    };
  }
  return b;
}

}  // namespace

const Backend& cpu_w4a4_avx2_linear_backend() {
  static const Backend b = nvfp4_backend(LayerKind::linear, cpu::Nvfp4Mode::w4a4);
  return b;
}

const Backend& cpu_w4a4_avx2_moe_backend() {
  static const Backend b = nvfp4_backend(LayerKind::moe, cpu::Nvfp4Mode::w4a4);
  return b;
}

const Backend& cpu_w4a16_avx2_linear_backend() {
  static const Backend b = nvfp4_backend(LayerKind::linear, cpu::Nvfp4Mode::w4a16);
  return b;
}

const Backend& cpu_w4a16_avx2_moe_backend() {
  static const Backend b = nvfp4_backend(LayerKind::moe, cpu::Nvfp4Mode::w4a16);
  return b;
}

}  // namespace fp4lm::kernels
