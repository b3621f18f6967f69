#pragma once
// Shared pieces of the CPU backends' registrations (ISA-neutral code): the shape checks of the
// NVFP4 kernels. Which backend may run on this CPU is kernels/isa.h's decision.
#include <string>

#include "kernels/backend.h"

namespace fp4lm::kernels::cpu {

// "" when an NVFP4 layer's shape suits the CPU kernels, else why not.
std::string check_nvfp4_linear(const LinearProblem& p);
std::string check_nvfp4_moe(const MoeProblem& p);

}  // namespace fp4lm::kernels::cpu
