#pragma once
// The FP8 W8A16 kernels of one instruction set as a table (the ISA seam, as nvfp4_kernels.h):
// Fp8Linear calls kernels only through the table its backend's registration chose.
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/fp8_matrix.h"

namespace fp4lm::kernels::cpu {

struct Fp8Kernels {
  const char* isa = "";  // "avx2", "avx512"
  // y[t, r] = x_t · W_rᵀ (+ bias) for rows [r0, r1) and every token, on the calling thread; y
  // [m, n] in `act`. Each (row, token) result is one fixed sequence of operations (per 16
  // (AVX2) / 32 (AVX-512) elements: two FMAs into one accumulator, then a fixed horizontal sum),
  // so it never depends on the tile, the row range, the thread count or the other tokens.
  void (*rows)(const Fp8Matrix& w, const Fp8Input& in, int64_t r0, int64_t r1, void* y, DType act) = nullptr;
};

// Call a table's functions only when its backend's unavailable_reason() is "" (the AVX-512
// table is empty when the compiler could not build its kernels).
const Fp8Kernels& fp8_kernels_avx2();
const Fp8Kernels& fp8_kernels_avx512();

// Rows per unit of parallel work (a multiple of every row tile of both ISAs).
inline constexpr int64_t kFp8RowBlock = 24;

// The kernels themselves (fp8_w8a16_avx2.cpp, fp8_w8a16_avx512.cpp).
void fp8_w8a16_rows_avx2(const Fp8Matrix& w, const Fp8Input& in, int64_t r0, int64_t r1, void* y, DType act);
void fp8_w8a16_rows_avx512(const Fp8Matrix& w, const Fp8Input& in, int64_t r0, int64_t r1, void* y, DType act);

}  // namespace fp4lm::kernels::cpu
