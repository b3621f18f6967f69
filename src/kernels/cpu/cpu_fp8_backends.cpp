// Registration of the FP8 W8A16 Linear and MoE backends, `cpu_fp8_w8a16_avx2` and
// `cpu_fp8_w8a16_avx512`: E4M3 weights (per-tensor or per-channel weight_scale) decoded exactly
// in registers, 16-bit (or f32) activations never quantized — Marlin-FP8's semantics, as vLLM
// runs FP8 checkpoints on GPUs without FP8 compute. They match on the weight key alone, so they
// serve both FP8 W8A8 checkpoints (the oracle's default for them; the W8A8 emulation stays on
// `reference`) and weight-only FP8 layers. Kernels: fp8_w8a16_avx2.cpp, fp8_w8a16_avx512.cpp;
// wrapper: fp8_linear.cpp; MoE: moe_grouped.cpp.
#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_isa_support.h"
#include "kernels/cpu/fp8_linear.h"
#include "kernels/cpu/moe_grouped.h"

namespace fp4lm::kernels {

namespace {

// As the NVFP4 AVX-512 backends: not built, or switched off by FP4LM_DISABLE_ISA=avx512.
std::string avx512_unavailable_reason() {
#ifdef FP4LM_HAVE_AVX512_KERNELS
  if (const char* off = std::getenv("FP4LM_DISABLE_ISA"); off && std::string_view(off) == "avx512")
    return "disabled by FP4LM_DISABLE_ISA=avx512";
  return cpu::cpu_lacks({"avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl"});
#else
  return "built without the AVX-512 kernels (the compiler lacks one of the -mavx512 flags)";
#endif
}

Backend fp8_backend(LayerKind kind, bool avx512) {
  const cpu::Fp8Kernels& isa = avx512 ? cpu::fp8_kernels_avx512() : cpu::fp8_kernels_avx2();
  Backend b;
  b.name = avx512 ? "cpu_fp8_w8a16_avx512" : "cpu_fp8_w8a16_avx2";
  b.kind = kind;
  b.schemes = {kFp8W8A16};
  b.weight_key_only = true;
  b.act_dtypes = {DType::F32, DType::BF16, DType::F16};
  b.unavailable_reason = avx512 ? avx512_unavailable_reason : cpu::avx2_unavailable_reason;
  auto make = [&isa](LinearWeights w, const LinearProblem& p) {
    return std::make_unique<cpu::Fp8Linear>(std::move(w), p, isa);
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
        return fmt::format("hidden {} / intermediate {} / {} experts: all need to be positive", p.hidden, p.inter,
                           p.num_experts);
      return "";
    };
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

const Backend& cpu_fp8_w8a16_avx512_linear_backend() {
  static const Backend b = fp8_backend(LayerKind::linear, true);
  return b;
}
const Backend& cpu_fp8_w8a16_avx512_moe_backend() {
  static const Backend b = fp8_backend(LayerKind::moe, true);
  return b;
}
const Backend& cpu_fp8_w8a16_avx2_linear_backend() {
  static const Backend b = fp8_backend(LayerKind::linear, false);
  return b;
}
const Backend& cpu_fp8_w8a16_avx2_moe_backend() {
  static const Backend b = fp8_backend(LayerKind::moe, false);
  return b;
}

}  // namespace fp4lm::kernels
