#include "kernels/cpu/cpu_avx2_support.h"

#include <fmt/format.h>

#include "core/cpu_features.h"

namespace fp4lm::kernels::cpu {

std::string avx2_unavailable_reason() {
  const CpuFeatures& f = cpu_features();
  std::string missing;
  if (!f.avx2) missing += " avx2";
  if (!f.fma) missing += " fma";
  if (!f.f16c) missing += " f16c";
  return missing.empty() ? "" : "CPU lacks" + missing + " (detected: " + f.describe() + ")";
}

std::string check_nvfp4_linear(const LinearProblem& p) {
  if (p.n <= 0 || p.k <= 0 || p.k % 16 != 0)
    return fmt::format("shape [{}, {}]: needs n > 0 and k a positive multiple of 16", p.n, p.k);
  return "";
}

std::string check_nvfp4_moe(const MoeProblem& p) {
  if (p.hidden <= 0 || p.inter <= 0 || p.hidden % 16 != 0 || p.inter % 16 != 0)
    return fmt::format("hidden {} / intermediate {}: both need to be positive multiples of 16",
                       p.hidden, p.inter);
  if (p.num_experts <= 0) return fmt::format("{} experts", p.num_experts);
  return "";
}

}  // namespace fp4lm::kernels::cpu
