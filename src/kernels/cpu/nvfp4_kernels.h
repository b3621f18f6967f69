#pragma once
// One instruction set's NVFP4 kernels as a table of functions (the ISA seam). The ISA-neutral
// Nvfp4Linear (and through it GroupedMoe) calls kernels only through a table; a backend's
// registration chooses the table (backend_factory.h). A new ISA is a new table in its own
// cpu/<isa>/ files plus registration lines. Layouts and inner loops: docs/KERNELS.md.
#include <cstdint>
#include <memory>
#include <optional>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/nvfp4_matrix.h"
#include "kernels/cpu/row_split_linear.h"

namespace fp4lm::kernels::cpu {

struct Nvfp4Kernels {
  const char* isa = "";  // "avx2", "avx512"
  // ---- W4A16: x never quantized to 4 bits; fp32 accumulation. AVX-512 uses x exactly; AVX2
  // holds it as int16 per 16-block with a shared exponent (error bound: docs/KERNELS.md).
  // x [m, k] in `act` -> the call's activations in the kernel's own layout.
  std::unique_ptr<PreparedInput> (*a16_input)(const void* x, DType act, int64_t m, int64_t k,
                                              ThreadPool& pool) = nullptr;
  // Rows per unit of parallel work for a call of m tokens (a multiple of every row tile).
  int64_t (*a16_row_block)(int64_t m, int64_t k) = nullptr;
  // y[t, r] = x_t · W_rᵀ (+ bias) for rows [r0, r1) of every token, on the calling thread; y
  // [m, n] in `act`. `in` comes from this table's a16_input.
  void (*a16_rows)(const Nvfp4Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y,
                   DType act) = nullptr;
  // ---- W4A4: x quantized at run time by the W4A4 rule with `input_scale` (bit-identical to
  // quant::quantize_activation), or, when it is nullopt, each token with its own
  // quant::dynamic_activation_scale (the epilogue multiplies by the token's scale either way);
  // throws Error on non-finite x.
  std::unique_ptr<PreparedInput> (*a4_input)(const void* x, DType act, int64_t m, int64_t k,
                                             std::optional<float> input_scale, ThreadPool& pool) = nullptr;
  int64_t (*a4_row_block)(int64_t m, int64_t k) = nullptr;
  void (*a4_rows)(const Nvfp4Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y,
                  DType act) = nullptr;
};

// Call a table's functions only when its backend's unavailable_reason() is "".
const Nvfp4Kernels& nvfp4_kernels_avx2();    // avx2/nvfp4_table.cpp
const Nvfp4Kernels& nvfp4_kernels_avx512();  // avx512/nvfp4_table.cpp
// As avx512, from 64 (W4A16) / 24 (W4A4) tokens by the register-blocked GEMM kernels (the same bits):
// avx512/nvfp4_w4a16_gemm.cpp, avx512/nvfp4_w4a4_gemm.cpp.
const Nvfp4Kernels& nvfp4_kernels_avx512_gemm();

}  // namespace fp4lm::kernels::cpu
