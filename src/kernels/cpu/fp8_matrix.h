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

}  // namespace fp4lm::kernels::cpu
