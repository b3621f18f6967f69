#pragma once
// The AMX kernel tables (the ISA seam of nvfp4_kernels.h / dense_kernels.h) and their emulated
// twins. The native tables (kernels/cpu/amx/, built with -mamx-*) run the tile instructions:
// call them only when their backend's unavailable_reason() is "". The emulated tables run the
// same kernel bodies (amx_gemm.h) through the scalar tile emulation on any CPU: the tests use
// them; no backend is registered on them (they are slow by design).
#include <cstdint>
#include <memory>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/dense_kernels.h"
#include "kernels/cpu/nvfp4_kernels.h"

namespace fp4lm::kernels::cpu {

// NVFP4 W4A16 only (its W4A4 entries are null: the AMX backends register W4A16).
const Nvfp4Kernels& nvfp4_kernels_amx();           // amx/nvfp4_w4a16.cpp
const Nvfp4Kernels& nvfp4_kernels_amx_emulated();  // amx_emulated_tables.cpp
// BF16 weight rows by tiles; F32/F16 weight rows by dense_kernels_avx512() (native) or an
// Error (emulated: the tests give it BF16 weights).
const DenseKernels& dense_kernels_amx();           // amx/dense.cpp
const DenseKernels& dense_kernels_amx_emulated();  // amx_emulated_tables.cpp

namespace amx {
// Shared entries of the tables (amx_emulated_tables.cpp): the call's activations as bf16 pieces
// (amx_panels.h), and rows per unit of parallel work (a multiple of the 32-row panel).
std::unique_ptr<PreparedInput> a16_input(const void* x, DType act, int64_t m, int64_t k, ThreadPool& pool);
int64_t row_block(int64_t m, int64_t k);
}  // namespace amx

}  // namespace fp4lm::kernels::cpu
