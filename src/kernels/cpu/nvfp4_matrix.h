#pragma once
// The canonical prepared form of an NVFP4 layer for the CPU kernels (docs/KERNELS.md). It is the
// checkpoint's own layout, used in place: codes U8 [rows, k/2] and E4M3 block scales [rows, k/16]
// stay in the mmapped shards (no repacked copy, so resident weight memory equals the checkpoint's
// bytes); what is added is a row table (where each output row's codes and scales live, across
// fused shards) and the per-row global scale (each shard keeps its own weight_scale_2).
// Both AVX2 backends (W4A16 and W4A4) run on the same Nvfp4Matrix.
#include <cstdint>
#include <memory>
#include <vector>

#include "kernels/weights.h"

namespace fp4lm::kernels::cpu {

struct Nvfp4Matrix {
  int64_t n = 0, k = 0;
  std::vector<const uint8_t*> row_codes;   // [n] -> k/2 bytes each
  std::vector<const uint8_t*> row_scales;  // [n] -> k/16 E4M3 bytes each
  std::vector<float> row_global;           // [n] the row's shard weight_scale_2
  std::vector<float> bias;                 // [n] or empty
  float input_scale = 0.0f;                // W4A4: the shared input's scale (max over shards)
  bool per_token_input_scale = false;      // W4A4: each token's own scale instead (LinearWeights)
  size_t weight_bytes = 0;                 // codes + block scales
  std::shared_ptr<const void> keepalive;   // the mmaps / buffers the row pointers point into
};

// Builds the row table from a layer's shards. Throws fp4lm::Error naming the shard when the
// weights are inconsistent: k not a multiple of 16, missing pointers, shard rows not summing to
// n, a non-finite global scale, an E4M3 NaN block scale (0x7F/0xFF), or — when `need_input_scale`
// (W4A4 with a static scale) — an input_scale that is not finite and > 0.
Nvfp4Matrix prepare_nvfp4_matrix(LinearWeights w, bool need_input_scale);

// An MXFP4 layer (Mxfp4View shards) as the same numbers in this form (mxfp4_matrix.cpp): codes in
// place, E4M3 block scales converted into an owned buffer, a per-row power-of-two global scale.
// Error naming the shard and row when a row's scales span more than E4M3 holds (2^17).
Nvfp4Matrix prepare_mxfp4_as_nvfp4_matrix(LinearWeights w);

}  // namespace fp4lm::kernels::cpu
