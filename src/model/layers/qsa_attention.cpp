#include "model/layers/qsa_attention.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "model/layers/activation.h"
#include "model/state/kv_cache.h"
#include "model/state/kv_quant.h"
#include "model/load/model_loader.h"
#include "model/layers/rms_norm.h"
#include "model/layers/rope.h"
#include "model/state/sequence_state.h"
#include "model/state/state_layout.h"
#include "model/layers/torch_topk.h"

namespace fp4lm::model {

namespace {

// Each of `rows` rows of dim values RMS-normalized times w (1 + w), in place.
void norm_rows(float* x, int64_t rows, int64_t dim, const std::vector<float>& w, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    float* v = x + r * dim;
    double ss = 0;
    for (int64_t d = 0; d < dim; ++d) ss += static_cast<double>(v[d]) * v[d];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(dim)) + static_cast<float>(eps));
    for (int64_t d = 0; d < dim; ++d) v[d] = v[d] * inv * w[static_cast<size_t>(d)];
  }
}

}  // namespace

QsaAttention::QsaAttention(const LayerBuild& b, int64_t layer)
    : rope_(b.rope), act_(b.loader.dtype()), layer_(layer) {
  const ModelConfig& c = b.loader.config();
  const Qwen4ExpConfig& q = c.qwen4_exp;
  hidden_ = c.hidden_size;
  heads_ = q.index_heads;
  dim_ = q.index_head_dim;
  ratio_ = q.index_compress_ratio;
  topk_blocks_ = q.index_budget / q.index_compress_ratio;
  num_heads_ = c.num_heads;
  num_kv_heads_ = c.num_kv_heads;
  head_dim_ = c.head_dim;
  eps_ = c.rms_norm_eps;
  attn_ = std::make_unique<Attention>(b, layer);  // declares the K/V slot first
  const std::string p = fmt::format("model.layers.{}.self_attn.indexer", layer);
  qk_ = b.loader.tensor_f32(p + ".index_qk_proj.weight", {(heads_ + 1) * dim_, hidden_});
  q_norm_ = load_rms_norm(b.loader, p + ".q_layernorm.weight", dim_).weight();
  k_norm_ = load_rms_norm(b.loader, p + ".k_layernorm.weight", dim_).weight();
  if (b.state.kv_quant() != KvQuant::none)
    fail("layer {}: the checkpoint declares a {} KV cache, but the QSA indexer's keys are a key-only slot, which "
         "fp4lm stores only in a float dtype or FP8; pass --kv-cache-dtype (bfloat16, float16, float32 or fp8)",
         layer, kv_quant_name(b.state.kv_quant()));
  key_slot_ = b.state.add_kv(layer, KvSlotShape{.kv_heads = 1, .head_dim = dim_, .window = 0, .key_only = true});
}

void QsaAttention::rotate(float* v, int64_t heads, int64_t pos) const {
  const int64_t r = std::min(rope_.head_dim(), dim_), half = r / 2;
  std::vector<float> ch(static_cast<size_t>(rope_.head_dim() / 2)), sh(ch.size());
  rope_.cos_sin(pos, ch.data(), sh.data());
  for (int64_t h = 0; h < heads; ++h) {
    float* x = v + h * dim_;
    for (int64_t j = 0; j < half; ++j) {
      const float a = x[j], b = x[j + half];
      x[j] = a * ch[static_cast<size_t>(j)] - b * sh[static_cast<size_t>(j)];
      x[j + half] = b * ch[static_cast<size_t>(j)] + a * sh[static_cast<size_t>(j)];
    }
  }
}

std::vector<std::vector<int32_t>> QsaAttention::select(const float* x, std::span<const SequenceSpan> spans) const {
  const int64_t H = heads_, D = dim_, R = ratio_, rows_qk = (H + 1) * D;
  int64_t m = 0;
  for (const SequenceSpan& s : spans) m += s.n;
  std::vector<float> qk(static_cast<size_t>(m * rows_qk));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t r = 0; r < rows_qk; ++r) {
      const float* w = qk_.data() + r * hidden_;
      const float* xi = x + i * hidden_;
      float acc = 0;
      for (int64_t k = 0; k < hidden_; ++k) acc += w[k] * xi[k];
      qk[static_cast<size_t>(i * rows_qk + r)] = acc;
    }
  round_to_dtype(qk.data(), qk.size(), act_);
  std::vector<float> q(static_cast<size_t>(m * H * D));
  for (const SequenceSpan& s : spans)
    for (int64_t j = 0; j < s.n; ++j) {
      const int64_t i = s.row0 + j, pos = s.pos0 + j;
      float* qi = q.data() + i * H * D;
      std::copy_n(qk.data() + i * rows_qk, H * D, qi);
      norm_rows(qi, H, D, q_norm_, eps_);
      round_to_dtype(qi, static_cast<size_t>(H * D), act_);
      rotate(qi, H, pos + s.rope_delta);
      round_to_dtype(qi, static_cast<size_t>(H * D), act_);
      s.state->kv().store(key_slot_, pos, qk.data() + i * rows_qk + H * D, nullptr);  // the raw key
    }

  std::vector<std::vector<int32_t>> out(static_cast<size_t>(m));
  const float inv_sqrt_d = 1.0f / std::sqrt(static_cast<float>(D));
  for (const SequenceSpan& s : spans) {
    const int64_t last = s.pos0 + s.n - 1, nb_max = (last + 1) / R;
    if (nb_max <= topk_blocks_) continue;  // every row of the span sees every visible token
    // The complete blocks' keys: the raw keys as stored, averaged in float32, rounded, normed, RoPE'd
    // at the block's first position.
    const KvCache& cache = s.state->kv();
    std::vector<float> raw(static_cast<size_t>(D)), keys(static_cast<size_t>(nb_max * D), 0.0f);
    for (int64_t b = 0; b < nb_max; ++b) {
      float* kb = keys.data() + b * D;
      for (int64_t t = b * R; t < (b + 1) * R; ++t) {
        cache.read_f32(key_slot_, 0, 0, t, 1, raw.data());
        for (int64_t d = 0; d < D; ++d) kb[d] += raw[static_cast<size_t>(d)];
      }
      for (int64_t d = 0; d < D; ++d) kb[d] /= static_cast<float>(R);
      round_to_dtype(kb, static_cast<size_t>(D), act_);
      norm_rows(kb, 1, D, k_norm_, eps_);
      round_to_dtype(kb, static_cast<size_t>(D), act_);
      rotate(kb, 1, b * R + s.rope_delta);
      round_to_dtype(kb, static_cast<size_t>(D), act_);
    }
    std::vector<float> score;
    for (int64_t j = 0; j < s.n; ++j) {
      const int64_t i = s.row0 + j, pos = s.pos0 + j, nb = (pos + 1) / R;
      if (nb <= topk_blocks_) continue;
      score.assign(static_cast<size_t>(nb), 0.0f);
      for (int64_t b = 0; b < nb; ++b) {
        float acc = 0;
        for (int64_t h = 0; h < H; ++h) {
          const float* qh = q.data() + (i * H + h) * D;
          const float* kb = keys.data() + b * D;
          float d = 0;
          for (int64_t c = 0; c < D; ++c) d += qh[c] * kb[c];
          acc += std::max(d, 0.0f);
        }
        score[static_cast<size_t>(b)] = acc * inv_sqrt_d;
      }
      // torch.topk's choice among tied scores (blocks every head scores negative: exactly 0).
      std::vector<int32_t> order = torch_topk_indices(score, topk_blocks_);
      std::sort(order.begin(), order.end());
      std::vector<int32_t>& sel = out[static_cast<size_t>(i)];
      for (int64_t e = 0; e < topk_blocks_; ++e)
        for (int64_t t = 0; t < R; ++t) sel.push_back(static_cast<int32_t>(order[static_cast<size_t>(e)] * R + t));
      for (int64_t t = nb * R; t <= pos; ++t) sel.push_back(static_cast<int32_t>(t));  // the tail
    }
  }
  return out;
}

void QsaAttention::forward(const float* x, std::span<const SequenceSpan> spans, float* y) const {
  const std::vector<std::vector<int32_t>> sel = select(x, spans);
  std::vector<AttentionSpan> a;
  a.reserve(spans.size());
  for (const SequenceSpan& s : spans)
    a.push_back({&s.state->kv(), s.row0, s.n, s.pos0, s.chunk_end, s.rope_pos, s.rope_delta, nullptr});
  const int64_t H = num_heads_, hd = head_dim_, qd = H * hd, per_kv_head = H / num_kv_heads_;
  auto core = [&](std::span<const AttentionSpan> sp, int64_t slot, const float* q, float* out) {
    // The rows seeing every visible token are a prefix of each span.
    std::vector<std::pair<const AttentionSpan*, int64_t>> sparse;  // (span, row)
    for (const AttentionSpan& s : sp) {
      int64_t d = 0;
      while (d < s.n && sel[static_cast<size_t>(s.row0 + d)].empty()) ++d;
      if (d > 0) {
        const AttentionSpan t{s.cache, 0, d, s.pos0, s.chunk_end, s.rope_pos, s.rope_delta, nullptr};
        causal_attention(std::span<const AttentionSpan>(&t, 1), slot, q + s.row0 * qd, H, out + s.row0 * qd);
      }
      for (int64_t j = d; j < s.n; ++j) sparse.emplace_back(&s, s.row0 + j);
    }
    if (sparse.empty()) return;
    const kernels::AttentionKernel& kern = kernels::attention_kernel();
    ThreadPool::global().parallel_for(static_cast<int64_t>(sparse.size()), [&](int64_t u0, int64_t u1, int) {
      std::vector<float> keys, values;
      for (int64_t u = u0; u < u1; ++u) {
        const AttentionSpan& s = *sparse[static_cast<size_t>(u)].first;
        const int64_t i = sparse[static_cast<size_t>(u)].second;
        const std::vector<int32_t>& toks = sel[static_cast<size_t>(i)];
        const int64_t n = static_cast<int64_t>(toks.size());
        keys.resize(static_cast<size_t>(n * hd));
        values.resize(keys.size());
        for (int64_t kvh = 0; kvh < num_kv_heads_; ++kvh) {
          for (int64_t e = 0; e < n; ++e) {
            s.cache->read_f32(slot, 0, kvh, toks[static_cast<size_t>(e)], 1, keys.data() + e * hd);
            s.cache->read_f32(slot, 1, kvh, toks[static_cast<size_t>(e)], 1, values.data() + e * hd);
          }
          for (int64_t h = kvh * per_kv_head; h < (kvh + 1) * per_kv_head; ++h) {
            kernels::attend_gathered(kern, q + i * qd + h * hd, keys.data(), values.data(), n, hd, out + i * qd + h * hd);
          }
        }
      }
    });
  };
  attn_->forward(x, std::span<const AttentionSpan>(a), y, core);
}

}  // namespace fp4lm::model
