#pragma once
// The prepared form of an FP8 (E4M3) layer for the CPU W8A16 kernels: the checkpoint's codes
// [rows, k] used in place (one byte per weight, no repacked copy) plus a row table across fused
// shards and each row's scale (the shard's per-tensor weight_scale, or its per-channel entry).
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/weights.h"

namespace fp4lm::kernels::cpu {

struct Fp8Matrix {
  int64_t n = 0, k = 0;
  std::vector<const uint8_t*> row_codes;  // [n] -> k E4M3 bytes each
  // [n] weight_scale × 256: the kernels decode E4M3 through fp16 as value / 256 (exact), and
  // the power of two is folded in here (exact too).
  std::vector<float> row_scale256;
  std::vector<float> bias;  // [n] or empty
  size_t weight_bytes = 0;
  std::shared_ptr<const void> keepalive;
};

// Throws fp4lm::Error naming the shard on inconsistent weights: not FP8, missing codes, shard
// rows not summing to n, a scale (per-tensor or per-row) that is not finite and > 0, or a
// per-channel scale of the wrong length.
Fp8Matrix prepare_fp8_matrix(LinearWeights w);

// x [m, k] in `act` -> fp32 rows of stride round_up(k, 32), zero-padded (both ISAs' input).
struct Fp8Input {
  int64_t m = 0, kp = 0;
  std::vector<float> x;
};
Fp8Input fp8_input(const void* x, DType act, int64_t m, int64_t k);

// The kernels (fp8_w8a16_avx2.cpp, fp8_w8a16_avx512.cpp): y[t, r] = x_t · W_rᵀ (+ bias) for
// rows [r0, r1) and every token, on the calling thread. Each (row, token) result is one fixed
// sequence of operations (per 16-element chunk: two 8-lane FMAs into one accumulator, then a
// fixed horizontal sum), so it never depends on the tile, the row range, the thread count or
// the other tokens of the call. The two ISAs give identical results.
void fp8_w8a16_rows_avx2(const Fp8Matrix& w, const Fp8Input& in, int64_t r0, int64_t r1, void* y, DType act);
void fp8_w8a16_rows_avx512(const Fp8Matrix& w, const Fp8Input& in, int64_t r0, int64_t r1, void* y, DType act);

// Rows per unit of parallel work (a multiple of every row tile).
inline constexpr int64_t kFp8RowBlock = 24;

}  // namespace fp4lm::kernels::cpu
