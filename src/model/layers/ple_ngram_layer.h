#pragma once
// Qwen4-Exp's Per-Layer Embedding (transformers' Qwen4ExpTextPLELayer), added to the residual
// streams [m, n, hidden] at the start of a PLE decoder layer: e = the token's hashed n-gram
// embedding (model/layers/ngram_embedding.h); key = norm_key(key_proj(e)) [n, hidden], value =
// value_proj(e) [hidden], query = norm_query(streams) (each stream normalized by itself, 1 + w);
// g_k = key_k·query_k / sqrt(hidden), gate_k = sign(g_k)·sqrt(max(|g_k|, 1e-6)); v_k =
// sigmoid(gate_k)·value; the streams gain v + silu(conv(norm_conv(v))) where conv is a causal
// depthwise conv over the n·hidden channels, kernel ple_conv_kernel_size, dilation ngram_size.
// Per-sequence state (one recurrent slot): the conv's last (K - 1)·ngram_size inputs
// [(K-1)·D, n·hidden] and the sequence's last ngram_size - 1 token ids (as floats; eos at the start).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/layer_build.h"
#include "model/layers/mixer.h"
#include "model/layers/ngram_embedding.h"

namespace fp4lm::model {

class PleNgramLayer {
 public:
  // Loads model.layers.<layer>.ple.* and declares its recurrent slot; ple_index: its place in ple_layer_ids.
  PleNgramLayer(const LayerBuild& b, int64_t layer, int64_t ple_index);
  // h [m, n·hidden] += the PLE output of each span's rows; tokens [m] the step's ids.
  void forward(float* h, const int32_t* tokens, std::span<const SequenceSpan> spans, DType act) const;
  size_t param_bytes() const;

 private:
  int64_t layer_, n_, hidden_, embed_dim_, kernel_, dilation_, slot_;
  int64_t history_rows_;  // (K - 1)·dilation
  double eps_;
  int64_t eos_, vocab_;
  NGramEmbedding ngram_;
  std::vector<float> key_, value_, norm_key_, norm_query_, norm_conv_, conv_;  // norms: 1 + w
  // Each of the n streams of row x [n·hidden] normalized by itself, times w.
  void group_norm(const float* x, const std::vector<float>& w, float* y) const;
};

}  // namespace fp4lm::model
