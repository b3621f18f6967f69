#pragma once
// Linux gives a process the AMX tile state (8 KiB of XSAVE area per thread) only on request:
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), once per process, before the first tile
// instruction (without it, TILELOADD faults). The AMX backends ask through this in their
// unavailable_reason(), after the ISA check, so a refusal is a reason in the oracle and the
// AVX-512 backends run instead.
#include <string>

namespace fp4lm::kernels::cpu {

// "" when this process may use the tile registers; else why not ("Linux refused the AMX tile
// state (arch_prctl ...: Operation not permitted)", "not Linux on x86-64", ...). The request is
// made on the first call only; later calls return its outcome.
std::string amx_tile_permission_reason();

}  // namespace fp4lm::kernels::cpu
