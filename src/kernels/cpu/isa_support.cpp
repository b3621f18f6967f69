#include "kernels/cpu/isa_support.h"

#include <fmt/format.h>

#include <iterator>

#include "core/cpu_features.h"

namespace fp4lm::kernels::cpu {

std::string cpu_lacks(std::initializer_list<std::string_view> needs) {
  const CpuFeatures& f = cpu_features();
  // describe() lists exactly the detected features, space separated.
  const std::string detected = f.describe();
  auto has = [&](std::string_view name) {
    for (size_t at = detected.find(name); at != std::string::npos; at = detected.find(name, at + 1)) {
      const size_t end = at + name.size();
      if ((at == 0 || detected[at - 1] == ' ') && (end == detected.size() || detected[end] == ' ')) return true;
    }
    return false;
  };
  std::string missing;
  for (std::string_view n : needs)
    if (!has(n)) fmt::format_to(std::back_inserter(missing), " {}", n);
  return missing.empty() ? std::string() : fmt::format("CPU lacks{} (detected: {})", missing, detected);
}

std::string avx2_unavailable_reason() { return cpu_lacks({"avx2", "fma", "f16c"}); }

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
