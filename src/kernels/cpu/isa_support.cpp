#include "kernels/cpu/isa_support.h"

#include <fmt/format.h>

namespace fp4lm::kernels::cpu {

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
