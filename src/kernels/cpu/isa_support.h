#pragma once
// Shared pieces of the CPU backends' registrations (ISA-neutral code): which CPU features a
// backend lacks, and the shape checks of the NVFP4 kernels.
#include <initializer_list>
#include <string>
#include <string_view>

#include "kernels/backend.h"

namespace fp4lm::kernels::cpu {

// "" when the CPU has every feature named in `needs` (names as cpu_features().describe() prints
// them: "avx2", "avx512vbmi", ...), else "CPU lacks avx512vbmi avx512bf16 (detected: ...)".
std::string cpu_lacks(std::initializer_list<std::string_view> needs);
// "" when the CPU has AVX2, FMA and F16C, else which of them it lacks.
std::string avx2_unavailable_reason();
// "" when an NVFP4 layer's shape suits the CPU kernels, else why not.
std::string check_nvfp4_linear(const LinearProblem& p);
std::string check_nvfp4_moe(const MoeProblem& p);

}  // namespace fp4lm::kernels::cpu
