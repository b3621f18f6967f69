#pragma once
// The FP8 W8A16 kernels of one instruction set as a table (the ISA seam, table_linear.h), and the
// raw-pointer row kernels behind the tables (cpu/avx2/fp8_w8a16.cpp, cpu/avx512/fp8_w8a16.cpp; their
// shared schedules: fp8_w8a16_schedule.h). Loops and rules: docs/KERNELS.md, "FP8 W8A16".
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "kernels/cpu/fp8_matrix.h"
#include "kernels/cpu/table_linear.h"

namespace fp4lm::kernels::cpu {

using Fp8Kernels = KernelTable<Fp8Matrix>;
// The Linear kernel of the FP8 backends: the checkpoint's E4M3 codes in place, activations used
// as they are (never quantized).
using Fp8Linear = TableLinear<Fp8Matrix>;

// Call a table's functions only when its backend's unavailable_reason() is "" (the AVX-512
// table is empty when the compiler could not build its kernels).
const Fp8Kernels& fp8_kernels_avx2();
const Fp8Kernels& fp8_kernels_avx512();
// The same kernels for block-wise FP8 matrices (prepare_fp8_block_matrix): x scaled per run of
// rows sharing a row of block scales, then the rows as above (fp8_tables.cpp).
const Fp8Kernels& fp8_block_kernels_avx2();
const Fp8Kernels& fp8_block_kernels_avx512();

// ---- The row kernels. Raw pointers only: nothing with vague linkage may be compiled with the
// AVX-512 flags (docs/KERNELS.md, "AVX-512 kernels").
struct Fp8Rows {
  const uint8_t* const* codes;  // [n] -> k E4M3 bytes
  const float* scale256;        // [n] weight_scale × 256
  const float* bias;            // [n] or nullptr
  int64_t n, k;
};

// Rows per unit of parallel work below the panel threshold (a multiple of every row tile).
inline constexpr int64_t kFp8RowBlock = 24;

// y[t, r] = x_t · W_rᵀ (+ bias) for rows [r0, r1) and tokens [0, m), on the calling thread; x fp32
// with row stride kp (a multiple of 32, zero-padded), y [m, n] in `act`. Calls of many tokens
// (AVX2: 8 or more, AVX-512: 32) decode each group of rows once into a panel; row_block(m,
// k) is then that group. Each (row, token) result
// is one fixed sequence of operations (per 16 (AVX2) elements two FMAs into one accumulator, per
// 32 (AVX-512) one vdpbf16ps per piece (A, B vectors of a 64-element chunk), then a fixed horizontal sum) in both schedules, so it never depends on the tile,
// the schedule, the row range, the thread count or the other tokens.
int64_t fp8_w8a16_row_block_avx2(int64_t m, int64_t k);
void fp8_w8a16_rows_avx2(const Fp8Rows& w, const float* x, int64_t kp, int64_t m, int64_t r0, int64_t r1, void* y,
                         DType act);
// AVX-512 (BF16): x as `pieces` bf16 terms per element in the decoder's order
// (fp8_avx512_pack_token: token_words per token, 64-byte aligned); products exact by vdpbf16ps.
int64_t fp8_avx512_token_words(int64_t k, int pieces);
void fp8_avx512_pack_token(const float* x, int64_t k, int pieces, uint16_t* out);
int64_t fp8_w8a16_row_block_avx512(int64_t m, int64_t k);
void fp8_w8a16_rows_avx512(const Fp8Rows& w, const uint16_t* x, int64_t tstride, int pieces, int64_t m, int64_t r0,
                           int64_t r1, void* y, DType act);

// Thread-local scratch of at least `bytes`, 64-byte aligned, for the panels (fp8_tables.cpp).
void* fp8_thread_scratch(size_t bytes);

}  // namespace fp4lm::kernels::cpu
