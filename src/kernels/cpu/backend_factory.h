#pragma once
// Builds the Backend records of the CPU backends from an ISA's kernel table, so every ISA's
// registration is a few lines (kernels/cpu/<isa>/*_backends.cpp) and all share the ISA-neutral wrappers
// (Nvfp4Linear, DenseLinear, Fp8Linear, GroupedMoe).
#include <functional>
#include <string>

#include "kernels/backend.h"
#include "kernels/cpu/dense_kernels.h"
#include "kernels/cpu/fp8_kernels.h"
#include "kernels/cpu/int4_kernels.h"
#include "kernels/cpu/int8_kernels.h"
#include "kernels/cpu/nvfp4_kernels.h"
#include "kernels/cpu/nvfp4_linear.h"

namespace fp4lm::kernels::cpu {

// An NVFP4 Linear or MoE backend: w4a16 matches on the weight key alone (it serves W4A4
// checkpoints at 16-bit activations too); w4a4 runs exactly (nvfp4_static, nvfp4_dynamic) and
// honours --a16-max-tokens. `needs`: the table's instruction set and the CPU features it uses.
Backend nvfp4_cpu_backend(std::string name, LayerKind kind, Nvfp4Mode mode, const Nvfp4Kernels& isa,
                          IsaNeeds needs);
// An unquantized (F32/BF16/F16 weights) Linear or MoE backend.
Backend dense_cpu_backend(std::string name, LayerKind kind, const DenseKernels& isa,
                          IsaNeeds needs);
// An FP8 W8A16 Linear or MoE backend: matches on the weight key alone (serves FP8 W8A8
// checkpoints at 16-bit activations, and weight-only FP8 layers), per-tensor / per-channel
// (`isa`) and block-wise FP8 (`block_isa`).
Backend fp8_cpu_backend(std::string name, LayerKind kind, const Fp8Kernels& isa, const Fp8Kernels& block_isa,
                        IsaNeeds needs);

// An int4 W4A16 Linear or MoE backend (group-quantized int4 weights, activations unquantized).
Backend int4_cpu_backend(std::string name, LayerKind kind, const Int4Kernels& isa, IsaNeeds needs);
// An int8 W8A16 Linear or MoE backend (int8 weights per output channel): matches on the weight key
// alone (serves W8A8_SQ layers behind model::Linear's int8 activation pass).
Backend int8_cpu_backend(std::string name, LayerKind kind, const Int8Kernels& isa, IsaNeeds needs);

}  // namespace fp4lm::kernels::cpu
