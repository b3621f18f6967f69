#pragma once
// Two float-row helpers the latent-attention family shares (MLA's attention, DeepSeek Sparse
// Attention's indexer): the interleaved-RoPE reordering and a dot product whose summation order
// depends only on the length (so a row's result never depends on its batch-mates).
#include <algorithm>
#include <cstdint>

namespace fp4lm::model {

// Interleaved pairs (x0, x1), (x2, x3), ... -> [x0, x2, ... | x1, x3, ...]: HF's
// apply_rotary_pos_emb_interleave is rotate-half RoPE on this order (q and k alike, so their
// products are unchanged). `tmp` holds n floats.
inline void deinterleave_pairs(float* x, int64_t n, float* tmp) {
  const int64_t half = n / 2;
  for (int64_t i = 0; i < half; ++i) {
    tmp[i] = x[2 * i];
    tmp[half + i] = x[2 * i + 1];
  }
  std::copy_n(tmp, n, x);
}

// Sixteen partial sums, so the compiler vectorizes it (one running sum is a chain of dependent
// adds, scalar: the absorbed decode's score and output products spent most of a step there).
inline float dot_lanes(const float* a, const float* b, int64_t n) {
  constexpr int64_t kLanes = 16;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int64_t l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

}  // namespace fp4lm::model
