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
  // Block-wise FP8 (block_k > 0): row r's weights are scaled per block_k columns by
  // row_block_scales[r][j / block_k] (the row_scale256 entries are then 256). Rows of one block
  // of rows share one pointer; the kernels scale x by it instead (fp8_tables.cpp).
  int64_t block_k = 0;
  std::vector<const float*> row_block_scales;  // [n]
  std::vector<std::vector<float>> block_scales;  // the shards' scale grids the pointers point into
  // The most significant bits any block scale has (1: powers of two, <= 8: bf16-exact values,
  // 24: any float). x' = x · s then needs at most bits(x) + scale_bits bits, so the AVX-512
  // kernels take x' in as few bf16 pieces as hold it exactly (fp8_block_pieces).
  int scale_bits = 24;
  size_t weight_bytes = 0;
  std::shared_ptr<const void> keepalive;
};

// Throws fp4lm::Error naming the shard on inconsistent weights: not FP8, missing codes, shard
// rows not summing to n, a scale (per-tensor or per-row) that is not finite and > 0, or a
// per-channel scale of the wrong length.
Fp8Matrix prepare_fp8_matrix(LinearWeights w);
// The same for block-wise FP8 (Fp8BlockView shards, one block_k for all); also an Error for a
// scale grid of the wrong size or a scale that is not finite and > 0.
Fp8Matrix prepare_fp8_block_matrix(LinearWeights w);

// Significant bits of a positive normal float (1 for a power of two, 24 at most); 24 otherwise.
int significant_bits(float v);
// bf16 pieces that hold x · s exactly for x in `act` (bf16 8 significant bits, f16 11, f32 24) and
// a scale of `scale_bits` bits: ceil(bits / 8) with bits = bits(x) for a power of two, else
// bits(x) + scale_bits; at most 3 (any fp32 value).
int fp8_block_pieces(DType act, int scale_bits);

// x [m, k] in `act` -> fp32 rows of stride round_up(k, 32), zero-padded (both ISAs' input).
struct Fp8Input {
  int64_t m = 0, k = 0, kp = 0;
  std::vector<float> x;
};
Fp8Input fp8_input(const void* x, DType act, int64_t m, int64_t k);

}  // namespace fp4lm::kernels::cpu
