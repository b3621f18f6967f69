#pragma once
// The prepared form of a group-quantized int4 layer (Int4View shards) for the CPU W4A16 kernels:
// the shards' codes, scales and zero points concatenated into one row-major layer, the zero
// points as floats, and the act-order permutations the call's x is gathered by (one per shard: the
// shards of a fused layer may each have their own) (docs/KERNELS.md,
// "int4 W4A16").
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/weights.h"

namespace fp4lm::kernels::cpu {

struct Int4Matrix {
  int64_t n = 0, k = 0, group = 0;
  std::vector<uint8_t> codes;  // [n, k/2], column 2j in the low nibble, in perm order
  std::vector<float> scales;   // [n, k/group]
  std::vector<float> zeros;    // [n, k/group], 0..16
  // The shards' act-order permutations ([k] or empty: column j of the codes multiplies
  // x[perm[j]]), each distinct one once; shard i ends at row shard_end[i] and uses perms[shard_perm[i]].
  std::vector<std::vector<int32_t>> perms;
  std::vector<int64_t> shard_end;
  std::vector<int> shard_perm;
  std::vector<float> bias;     // [n] or empty
  size_t weight_bytes = 0;
  std::shared_ptr<const void> keepalive;
};

// Throws fp4lm::Error naming the shard on inconsistent weights (check_int4_weights), and when
// the group size is not a multiple of 16 (the kernels decode 16 weights per step; every
// producer's group sizes, 32 to 128 and per-channel over a k that is a multiple of 16, are).
Int4Matrix prepare_int4_matrix(LinearWeights w);

// The row kernels' view of the matrix (raw pointers only: see fp8_kernels.h).
struct Int4Rows {
  const uint8_t* codes;
  const float* scales;
  const float* zeros;
  const float* bias;  // or nullptr
  int64_t n, k, group;
  int64_t groups = 0;  // k / group, derived once per call (int4_rows_view): no kernel loop divides
};

// The row kernels' view of m.
Int4Rows int4_rows_view(const Int4Matrix& m);

// x [m, k] in `act` -> fp32 [m, k], gathered by perm (x'[j] = x[perm[j]]) when it is non-empty.
std::vector<float> int4_input(const void* x, DType act, int64_t m, int64_t k, const std::vector<int32_t>& perm);

// Rows per unit of parallel work (a multiple of every row tile) and y[t, r] = x'_t · W_r (+ bias)
// for rows [r0, r1), tokens [0, m), on the calling thread: the AVX2 kernel of the groups the
// repacked layout does not take (int4_packed.h). Each (row, token) result is one fixed sequence of
// operations (per group a partial from zero, then × scale into one accumulator) then a fixed
// horizontal sum, whatever the schedule, tile, row range or thread count (int4_w4a16_schedule.h).
int64_t int4_w4a16_row_block_avx2(int64_t m, int64_t k);
void int4_w4a16_rows_avx2(const Int4Rows& w, const float* x, int64_t m, int64_t r0, int64_t r1, void* y,
                          DType act);

// Thread-local scratch of at least `bytes`, 64-byte aligned (the panels; int4_linear.cpp).
void* int4_thread_scratch(size_t bytes);

}  // namespace fp4lm::kernels::cpu
