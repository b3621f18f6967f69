#pragma once
// Shared pieces of the AVX2 backends' registrations (ISA-neutral code).
#include <string>

#include "kernels/backend.h"

namespace fp4lm::kernels::cpu {

// "" when the CPU has AVX2, FMA and F16C, else which of them it lacks.
std::string avx2_unavailable_reason();
// "" when an NVFP4 layer's shape suits the CPU kernels, else why not.
std::string check_nvfp4_linear(const LinearProblem& p);
std::string check_nvfp4_moe(const MoeProblem& p);

}  // namespace fp4lm::kernels::cpu
