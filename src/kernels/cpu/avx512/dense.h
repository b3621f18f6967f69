#pragma once
// The AVX-512 dense kernel (dense.cpp): BF16 weight rows × activations split into bf16 pieces,
// by vdpbf16ps or (no AVX512-BF16: Ice Lake) its two-FMA form. Raw-pointer entry points only
// (see nvfp4.h for why); the table around it is dense_table.cpp. Layout and loop:
// docs/KERNELS.md, "AVX-512 dense".
#include <cstdint>

#include "core/dtype.h"

namespace fp4lm::kernels::cpu::avx512 {

// `native_bf16`: the AVX512-BF16 instructions; false on a CPU without them: the same arithmetic
// from AVX-512F (common.h, dot_bf16 / cvt2_bf16). Pack and multiply with the same flag.
// Per token: ceil(k / 32) chunks × pieces × 32 bf16, element j of a chunk in word j; without
// native BF16 each piece's 32 bf16 as two vectors of 16 fp32: its odd elements, then its even ones.
int64_t dense_token_words(int64_t k, int pieces, bool native_bf16);
// One token: fp32 x [k] -> `out` [dense_token_words(k, pieces, native_bf16)], 64-byte aligned.
void dense_pack_token(const float* x, int64_t k, int pieces, uint16_t* out, bool native_bf16);

// y[t, r] = x_t · W_r (+ bias[r]) for rows [r0, r1) of a BF16 segment whose rows start at
// global row `row0` (`w` = the segment's first row, row stride k); y [m, n] in `act`.
void dense_bf16_rows(const uint16_t* w, int64_t row0, int64_t n, int64_t k, const float* bias, const uint16_t* xp,
                     int64_t m, int pieces, int64_t r0, int64_t r1, void* y, DType act, bool native_bf16);

}  // namespace fp4lm::kernels::cpu::avx512
