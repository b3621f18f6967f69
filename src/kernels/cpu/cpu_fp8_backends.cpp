// Registration of the FP8 W8A16 Linear and MoE backends, `cpu_fp8_w8a16_avx2` and
// `cpu_fp8_w8a16_avx512`: E4M3 weights (per-tensor or per-channel weight_scale) decoded exactly
// in registers, 16-bit (or f32) activations never quantized — Marlin-FP8's semantics, as vLLM
// runs FP8 checkpoints on GPUs without FP8 compute. They match on the weight key alone, so they
// serve both FP8 W8A8 checkpoints (the oracle's default for them; the W8A8 emulation stays on
// `reference`) and weight-only FP8 layers. Kernels: fp8_w8a16_avx2.cpp, fp8_w8a16_avx512.cpp;
// wrapper: fp8_linear.cpp; MoE: moe_grouped.cpp.
#include <fmt/format.h>

#include "kernels/backend.h"
#include "kernels/cpu/cpu_avx2_support.h"
#include "kernels/cpu/fp8_linear.h"
#include "kernels/cpu/moe_grouped.h"

namespace fp4lm::kernels {

namespace {

std::string avx512_unavailable_reason() {
  std::string missing;
  if (!__builtin_cpu_supports("avx512f")) missing += " avx512f";
  if (!__builtin_cpu_supports("avx512bw")) missing += " avx512bw";
  if (!__builtin_cpu_supports("avx512vl")) missing += " avx512vl";
  if (!__builtin_cpu_supports("f16c")) missing += " f16c";
  return missing.empty() ? "" : "CPU lacks" + missing;
}

Backend fp8_backend(LayerKind kind, cpu::Fp8Isa isa) {
  Backend b;
  b.name = isa == cpu::Fp8Isa::avx512 ? "cpu_fp8_w8a16_avx512" : "cpu_fp8_w8a16_avx2";
  b.kind = kind;
  b.schemes = {kFp8W8A16};
  b.weight_key_only = true;
  b.act_dtypes = {DType::F32, DType::BF16, DType::F16};
  b.unavailable_reason = isa == cpu::Fp8Isa::avx512 ? avx512_unavailable_reason : cpu::avx2_unavailable_reason;
  auto make = [isa](LinearWeights w, const LinearProblem& p) {
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
  static const Backend b = fp8_backend(LayerKind::linear, cpu::Fp8Isa::avx512);
  return b;
}
const Backend& cpu_fp8_w8a16_avx512_moe_backend() {
  static const Backend b = fp8_backend(LayerKind::moe, cpu::Fp8Isa::avx512);
  return b;
}
const Backend& cpu_fp8_w8a16_avx2_linear_backend() {
  static const Backend b = fp8_backend(LayerKind::linear, cpu::Fp8Isa::avx2);
  return b;
}
const Backend& cpu_fp8_w8a16_avx2_moe_backend() {
  static const Backend b = fp8_backend(LayerKind::moe, cpu::Fp8Isa::avx2);
  return b;
}

}  // namespace fp4lm::kernels
