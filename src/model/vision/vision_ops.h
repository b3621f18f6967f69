#pragma once
// Pieces the vision towers share (model/vision/*): LayerNorm rows in float32, and bidirectional
// attention within segments of rows (an image's patches) on the engine's attention kernel.
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace fp4lm::model {

// y = LN(x) per row of `dim` (two passes, mean and variance in double, the result in float32 as
// PyTorch's float LayerNorm up to rounding); y may not alias x.
void vision_layer_norm(const float* x, int64_t rows, int64_t dim, const std::vector<float>& w,
                       const std::vector<float>& b, float eps, float* y, ThreadPool& pool);

// softmax(q k^T / sqrt(head_dim)) v for every head, each row attending to every row of its own
// segment [segments[i], segments[i+1]) and nothing else. q, k, v: N rows of heads * head_dim
// (heads side by side, as a projection writes them), `row_stride` floats apart (heads * head_dim
// for separate projections, 3 * heads * head_dim inside a fused qkv); out: [N, heads * head_dim].
void segment_attention(const float* q, const float* k, const float* v, int64_t row_stride, int64_t heads,
                       int64_t head_dim, const std::vector<int64_t>& segments, float* out, ThreadPool& pool);

}  // namespace fp4lm::model
