#pragma once
// The one ISA decision every kernel family goes through (the oracle's GEMM/MoE backends, the
// attention variants, the gated delta rule): a variant declares the instruction set its code
// was built for and the CPU features it uses; isa_unavailable_reason() says whether it may run
// here. The CPU's features are detected once (core/cpu_features.h) and the environment override
// FP4LM_DISABLE_ISA is read once, with one meaning for every family:
//   FP4LM_DISABLE_ISA=amx     no AMX variant runs (the AVX-512 ones do);
//   FP4LM_DISABLE_ISA=avx512  no AVX-512 variant runs, nor AMX, built on it (the AVX2 ones do);
//   FP4LM_DISABLE_ISA=avx2    no AVX2 variant and nothing built on AVX2 runs: only the portable
//                             kernels (reference GEMM/MoE, attention, delta rule).
// Instruction sets form a chain (amx builds on avx512, avx512 on avx2, avx2 on portable); switching one off
// switches off every set built on it. An ARM port adds its sets (neon, sve) here, with their
// base, their build macro and their folder under kernels/cpu/ (docs/EXTENDING.md).
#include <optional>
#include <string>
#include <string_view>

#include "core/cpu_features.h"

namespace fp4lm::kernels {

enum class Isa : uint8_t { portable, avx2, avx512, amx };

std::string_view isa_name(Isa isa);  // "portable", "avx2", "avx512", "amx"
// The set this one builds on (portable for portable).
Isa isa_base(Isa isa);
// Whether this build compiled the set's kernels (x86 targets only; AVX-512 when the compiler
// takes every flag; AMX when it also takes -mamx-tile -mamx-bf16 -mamx-int8; none with
// -DFP4LM_FORCE_PORTABLE=ON).
bool isa_built(Isa isa);

// What a kernel variant needs: the instruction set its files were compiled for, and every CPU
// feature its code uses (checked at run time, whatever the set).
struct IsaNeeds {
  Isa isa = Isa::portable;
  CpuFeatureSet cpu;
};

// "" when a variant with these needs may run here, else why not, in this order:
//   "disabled by FP4LM_DISABLE_ISA=avx2", "built without the AVX-512 kernels (...)",
//   "CPU lacks avx512vbmi avx512bf16 (detected: ...)".
// Throws Error when FP4LM_DISABLE_ISA names no instruction set.
std::string isa_unavailable_reason(const IsaNeeds& needs);

// The set FP4LM_DISABLE_ISA names (read once per process), nullopt when unset or empty.
// Throws Error naming the variable and the accepted values when it names no instruction set.
std::optional<Isa> disabled_isa();

// The CPU features each x86 set's kernels use at least (AVX2 kernels: AVX2 + FMA + F16C;
// AVX-512 kernels add F, BW and VL; a family adds what else its code uses).
inline constexpr CpuFeatureSet kAvx2Features{CpuFeature::avx2, CpuFeature::fma, CpuFeature::f16c};
inline constexpr CpuFeatureSet kAvx512Features{CpuFeature::avx2,    CpuFeature::fma,      CpuFeature::f16c,
                                               CpuFeature::avx512f, CpuFeature::avx512bw, CpuFeature::avx512vl};
// AMX kernels (kernels/cpu/amx/): their files are built with the AVX-512 flags too (the epilogue
// and the panel decode are AVX-512 code), hence avx512bf16 as well as the tile features.
inline constexpr CpuFeatureSet kAmxBf16Features = kAvx512Features.with(
    {CpuFeature::avx512bf16, CpuFeature::amx_tile, CpuFeature::amx_bf16});

}  // namespace fp4lm::kernels
