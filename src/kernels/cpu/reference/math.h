#pragma once
// Plain decoding of LinearWeights, shared by the reference backend and the kernels' tests.
#include <cstdint>
#include <vector>

#include "kernels/weights.h"

namespace fp4lm::kernels {

// Row r of W (over all shards) as float32 values, including the shard's global scale:
// nvfp4: e2m1 × float(e4m3 block scale) × global_scale; fp8: float(e4m3) × global_scale.
void reference_weight_row(const LinearWeights& w, int64_t r, float* out);

// The activations the layer's scheme actually multiplies: for W4A4 the quantize-dequantize of
// x [m, k] with w.input_scale (run-time NVFP4 rule; each token's own scale when
// w.per_token_input_scale), for fp8 the static fp8 quantize-dequantize,
// for fp8_block W8A8 the per-token-group quantize-dequantize (fp8_group_qdq_activation),
// for int8 W8A8 quant::int8_qdq with w.input_scale,
// otherwise x itself.
std::vector<float> reference_activation_input(const LinearWeights& w, const float* x, int64_t m);

// Block-wise FP8 W8A8's activations (vLLM's per_token_group_quant_fp8, DeepSeek's act_quant):
// per token, per `group` elements along k (the last group may be shorter), s = max(amax, 1e-10)
// / 448, q = e4m3(clamp(x / s, ±448)) (true division, nearest even), returned as q × s.
std::vector<float> fp8_group_qdq_activation(const float* x, int64_t m, int64_t k, int64_t group);

// Every int8 shard of `w` consistent (Int8View): codes present, one finite scale > 0 per row, rows
// summing to n; for W8A8 a finite input_scale > 0. Error naming the shard.
void check_int8_weights(const LinearWeights& w);

// Every int4 shard of `w` consistent (Int4View): group > 0 dividing k, k even, codes / scales /
// zeros of [rows, k/2] / [rows, k/group], zeros <= 16 (GPTQ v1 zero points read back reach 16), scales finite, perm empty or a
// permutation of [0, k). Error naming the shard.
void check_int4_weights(const LinearWeights& w);

// Bytes the layer's weights occupy (codes + block scales, or the dense matrix).
size_t linear_weight_bytes(const LinearWeights& w);

}  // namespace fp4lm::kernels
