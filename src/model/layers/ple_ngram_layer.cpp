#include "model/layers/ple_ngram_layer.h"

#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "model/layers/activation.h"
#include "model/load/model_loader.h"
#include "model/layers/rms_norm.h"
#include "model/state/sequence_state.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

PleNgramLayer::PleNgramLayer(const LayerBuild& b, int64_t layer, int64_t ple_index)
    : layer_(layer),
      ngram_(b.loader, fmt::format("model.layers.{}.ple.ple_embedding", layer), ple_index,
             b.loader.config().qwen4_exp.ple_embed_dim) {
  const ModelConfig& c = b.loader.config();
  const Qwen4ExpConfig& q = c.qwen4_exp;
  const ModelLoader& l = b.loader;
  const std::string p = fmt::format("model.layers.{}.ple", layer);
  n_ = q.hc_count;
  hidden_ = c.hidden_size;
  embed_dim_ = q.ple_embed_dim;
  kernel_ = q.ple_conv_kernel;
  dilation_ = q.ngram_size;
  history_rows_ = (kernel_ - 1) * dilation_;
  eps_ = c.rms_norm_eps;
  eos_ = q.eos_token_id;
  vocab_ = c.vocab_size;
  const int64_t w = n_ * hidden_;
  key_ = l.tensor_f32(p + ".key_proj.weight", {w, embed_dim_});
  value_ = l.tensor_f32(p + ".value_proj.weight", {hidden_, embed_dim_});
  norm_key_ = load_rms_norm(l, p + ".norm_key.weight", w).weight();
  norm_query_ = load_rms_norm(l, p + ".norm_query.weight", w).weight();
  norm_conv_ = load_rms_norm(l, p + ".norm_conv.weight", w).weight();
  conv_ = l.tensor_f32(p + ".conv1d.weight", {w, 1, kernel_});
  slot_ = b.state.add_recurrent(static_cast<size_t>(history_rows_ * w + ngram_.context()));
}

size_t PleNgramLayer::param_bytes() const {
  return (key_.size() + value_.size() + norm_key_.size() + norm_query_.size() + norm_conv_.size() + conv_.size()) *
         sizeof(float);
}

void PleNgramLayer::group_norm(const float* x, const std::vector<float>& w, float* y) const {
  for (int64_t k = 0; k < n_; ++k) {
    const float* xs = x + k * hidden_;
    double ss = 0;
    for (int64_t d = 0; d < hidden_; ++d) ss += static_cast<double>(xs[d]) * xs[d];
    const float r = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(hidden_)) + static_cast<float>(eps_));
    for (int64_t d = 0; d < hidden_; ++d) y[k * hidden_ + d] = xs[d] * r * w[static_cast<size_t>(k * hidden_ + d)];
  }
}

void PleNgramLayer::forward(float* h, const int32_t* tokens, std::span<const SequenceSpan> spans, DType act) const {
  if (!tokens) fail("layer {}: the PLE n-gram embedding needs the step's token ids (no embeddings input)", layer_);
  const int64_t w = n_ * hidden_, ctx = ngram_.context(), E = embed_dim_;
  const float inv_sqrt_h = 1.0f / std::sqrt(static_cast<float>(hidden_));
  for (const SequenceSpan& s : spans) {
    const int64_t n = s.n;
    const float* in = s.state->recurrent_in(slot_);
    float* out = s.state->recurrent_out(slot_);
    const bool fresh = s.pos0 == 0;
    // The token history: the last ctx ids before the span (eos at the start), then the span's.
    std::vector<int64_t> hist(static_cast<size_t>(ctx + n));
    for (int64_t j = 0; j < ctx; ++j)
      hist[static_cast<size_t>(j)] = fresh ? eos_ : static_cast<int64_t>(in[history_rows_ * w + j]);
    for (int64_t j = 0; j < n; ++j) {
      const int32_t t = tokens[s.row0 + j];
      if (t < 0 || t >= vocab_) fail("layer {}: token id {} outside the vocabulary [0, {})", layer_, t, vocab_);
      hist[static_cast<size_t>(ctx + j)] = t;
    }
    std::vector<float> emb(static_cast<size_t>(n * E));
    ngram_.embed(hist, n, emb.data());
    round_to_dtype(emb.data(), emb.size(), act);
    // The conv's input sequence: history_rows_ earlier normed rows, then the span's.
    std::vector<float> xin(static_cast<size_t>((history_rows_ + n) * w), 0.0f);
    if (!fresh) std::copy_n(in, history_rows_ * w, xin.begin());
    std::vector<float> gv(static_cast<size_t>(n * w)), key(static_cast<size_t>(w)), q(static_cast<size_t>(w)),
        value(static_cast<size_t>(hidden_));
    for (int64_t j = 0; j < n; ++j) {
      const float* e = emb.data() + j * E;
      for (int64_t r = 0; r < w; ++r) {
        float acc = 0;
        for (int64_t k = 0; k < E; ++k) acc += key_[static_cast<size_t>(r * E + k)] * e[k];
        key[static_cast<size_t>(r)] = acc;
      }
      for (int64_t r = 0; r < hidden_; ++r) {
        float acc = 0;
        for (int64_t k = 0; k < E; ++k) acc += value_[static_cast<size_t>(r * E + k)] * e[k];
        value[static_cast<size_t>(r)] = acc;
      }
      round_to_dtype(key.data(), key.size(), act);
      round_to_dtype(value.data(), value.size(), act);
      group_norm(key.data(), norm_key_, key.data());
      group_norm(h + (s.row0 + j) * w, norm_query_, q.data());
      round_to_dtype(key.data(), key.size(), act);
      round_to_dtype(q.data(), q.size(), act);
      float* g = gv.data() + j * w;
      for (int64_t k = 0; k < n_; ++k) {
        double dot = 0;
        for (int64_t d = 0; d < hidden_; ++d) dot += static_cast<double>(key[static_cast<size_t>(k * hidden_ + d)]) *
                                                  q[static_cast<size_t>(k * hidden_ + d)];
        const float gate = static_cast<float>(dot) * inv_sqrt_h;
        const float sg = gate > 0 ? 1.0f : gate < 0 ? -1.0f : 0.0f;
        const float gated = std::sqrt(std::max(std::abs(gate), 1e-6f)) * sg;
        const float sig = 1.0f / (1.0f + std::exp(-gated));
        for (int64_t d = 0; d < hidden_; ++d) g[k * hidden_ + d] = sig * value[static_cast<size_t>(d)];
      }
      round_to_dtype(g, static_cast<size_t>(w), act);
      float* xn = xin.data() + (history_rows_ + j) * w;
      group_norm(g, norm_conv_, xn);
      round_to_dtype(xn, static_cast<size_t>(w), act);
    }
    // Dilated causal depthwise conv, SiLU; the streams gain gv + conv.
    std::vector<float> co(static_cast<size_t>(w));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t ch = 0; ch < w; ++ch) {
        float acc = 0;
        for (int64_t k = 0; k < kernel_; ++k)
          acc += conv_[static_cast<size_t>(ch * kernel_ + k)] * xin[static_cast<size_t>((j + k * dilation_) * w + ch)];
        co[static_cast<size_t>(ch)] = silu(acc);
      }
      round_to_dtype(co.data(), co.size(), act);
      float* x = h + (s.row0 + j) * w;
      const float* g = gv.data() + j * w;
      for (int64_t ch = 0; ch < w; ++ch) co[static_cast<size_t>(ch)] += g[ch];
      round_to_dtype(co.data(), co.size(), act);
      for (int64_t ch = 0; ch < w; ++ch) x[ch] += co[static_cast<size_t>(ch)];
      round_to_dtype(x, static_cast<size_t>(w), act);
    }
    // The state after the span: the conv's last inputs and the last ctx ids.
    std::copy_n(xin.data() + n * w, history_rows_ * w, out);
    for (int64_t j = 0; j < ctx; ++j) out[history_rows_ * w + j] = static_cast<float>(hist[static_cast<size_t>(n + j)]);
  }
}

}  // namespace fp4lm::model
