#include "model/layers/dsa_indexer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/layers/activation.h"
#include "model/load/model_loader.h"
#include "model/layers/rope.h"
#include "model/layers/row_ops.h"
#include "model/state/sequence_state.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

int32_t* DsaSelection::reset(int64_t m) {
  rows_ = m;
  sel_.assign(static_cast<size_t>(m * topk_), -1);
  return sel_.data();
}

std::span<const uint8_t> DsaSelection::carried(int64_t rows) const {
  if (rows != rows_)
    fail("pipeline: the sparse-attention selections of this step cover {} rows, the step has {}", rows_, rows);
  return {reinterpret_cast<const uint8_t*>(sel_.data()), sel_.size() * sizeof(int32_t)};
}

void DsaSelection::receive(std::span<const uint8_t> bytes, int64_t rows) {
  const size_t want = static_cast<size_t>(rows * topk_) * sizeof(int32_t);
  if (bytes.size() != want)
    fail("pipeline: the stage before sent {} bytes of sparse-attention selections, {} rows × index_topk {} need {}",
         bytes.size(), rows, topk_, want);
  std::memcpy(reset(rows), bytes.data(), want);
}

std::shared_ptr<DsaSelection> dsa_selection(ModelLoader& l) {
  return l.shared<DsaSelection>("dsa.selection", [&] {
    const DsaConfig& d = l.config().dsa;
    auto s = std::make_shared<DsaSelection>(d.index_topk);
    // Only GLM-5's shared layers read a selection another layer made (perhaps on a stage before).
    if (std::find(d.shared.begin(), d.shared.end(), true) != d.shared.end()) l.carry_across_stages(s);
    return s;
  });
}

DsaIndexer::DsaIndexer(const LayerBuild& b, int64_t layer) : layer_(layer), rope_(b.rope) {
  ModelLoader& loader = b.loader;
  const ModelConfig& c = loader.config();
  heads_ = c.dsa.index_n_heads;
  dim_ = c.dsa.index_head_dim;
  rope_dims_ = c.mla.qk_rope_head_dim;
  topk_ = c.dsa.index_topk;
  interleave_ = c.dsa.rope_interleave;
  act_ = loader.dtype();
  if (rope_.head_dim() != rope_dims_)
    fail("layer {}: RoPE covers {} dims but the indexer rotates qk_rope_head_dim {}", layer, rope_.head_dim(),
         rope_dims_);
  const std::string p = fmt::format("model.layers.{}.self_attn.indexer", layer);
  wq_b_ = loader.load_linear(p + ".wq_b");
  wk_ = loader.load_linear(p + ".wk");
  weights_proj_ = loader.load_linear(p + ".weights_proj");
  k_norm_w_ = loader.tensor_f32(p + ".k_norm.weight", {dim_});
  k_norm_b_ = loader.tensor_f32(p + ".k_norm.bias", {dim_});
  // Its keys in the cache's dtype (an FP8 cache: scale 1, the keys are LayerNorm outputs).
  kv_slot_ = b.state.add_kv(layer, KvSlotShape{.kv_heads = 1, .head_dim = dim_, .window = 0, .key_only = true});
  loader.log_once(fmt::format(
      "DeepSeek Sparse Attention: each query attends to its index_topk {} best past positions as the indexer scores "
      "them ({} heads × {}, {} RoPE; its keys cached, {} values per position per indexer layer)",
      topk_, heads_, dim_, interleave_ ? "interleaved" : "half-split", dim_));
}

size_t DsaIndexer::weight_bytes() const {
  return wq_b_->weight_bytes() + wk_->weight_bytes() + weights_proj_->weight_bytes();
}

size_t DsaIndexer::own_param_bytes() const { return (k_norm_w_.size() + k_norm_b_.size()) * sizeof(float); }

void DsaIndexer::select(const float* x, const float* q_resid, std::span<const SequenceSpan> spans,
                        DsaSelection& out) const {
  int64_t m = 0;
  for (const SequenceSpan& s : spans) m += s.n;
  const int64_t qd = heads_ * dim_;
  std::vector<float> q(static_cast<size_t>(m * qd)), k(static_cast<size_t>(m * dim_)), w(static_cast<size_t>(m * heads_));
  wq_b_->forward(q_resid, m, q.data());
  round_to_dtype(q.data(), q.size(), act_);
  wk_->forward(x, m, k.data());
  round_to_dtype(k.data(), k.size(), act_);
  // k_norm: LayerNorm over the head, in float32 (as torch's on a 16-bit input), one rounding.
  for (int64_t i = 0; i < m; ++i) {
    float* ki = k.data() + i * dim_;
    double mean = 0, var = 0;
    for (int64_t d = 0; d < dim_; ++d) mean += ki[d];
    mean /= static_cast<double>(dim_);
    for (int64_t d = 0; d < dim_; ++d) var += (ki[d] - mean) * (ki[d] - mean);
    var /= static_cast<double>(dim_);
    const double inv = 1.0 / std::sqrt(var + 1e-6);
    for (int64_t d = 0; d < dim_; ++d)
      ki[d] = static_cast<float>((ki[d] - mean) * inv) * k_norm_w_[static_cast<size_t>(d)] + k_norm_b_[static_cast<size_t>(d)];
  }
  round_to_dtype(k.data(), k.size(), act_);
  // The head weights in float32 (transformers keeps weights_proj in float32).
  weights_proj_->forward(x, m, w.data());
  const float head_scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(heads_)));
  for (float& v : w) v *= head_scale;
  // RoPE on the first qk_rope_head_dim dims of every query head and of the key; keys stored.
  std::vector<float> cos(static_cast<size_t>(rope_dims_ / 2)), sin(cos.size()), tmp(static_cast<size_t>(rope_dims_));
  for (const SequenceSpan& s : spans)
    for (int64_t j = 0; j < s.n; ++j) {
      const int64_t i = s.row0 + j;
      float* qi = q.data() + i * qd;
      float* ki = k.data() + i * dim_;
      if (interleave_) {
        for (int64_t h = 0; h < heads_; ++h) deinterleave_pairs(qi + h * dim_, rope_dims_, tmp.data());
        deinterleave_pairs(ki, rope_dims_, tmp.data());
      }
      rope_.cos_sin(s.pos0 + j, cos.data(), sin.data(), rope_.long_factors(s.end()));
      rope_.rotate(qi, heads_, cos.data(), sin.data(), dim_);
      rope_.rotate(ki, 1, cos.data(), sin.data(), dim_);
      round_to_dtype(qi, static_cast<size_t>(qd), act_);
      round_to_dtype(ki, static_cast<size_t>(dim_), act_);
      s.state->kv().store(kv_slot_, s.pos0 + j, ki, nullptr);
    }
  int32_t* sel = out.reset(m);
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(dim_)));
  for (const SequenceSpan& s : spans) {
    const int64_t ctx = s.pos0 + s.n;
    // The span's key history as stored (so FP8 / 16-bit rounding included); only when some row
    // is past the budget.
    std::vector<float> hist;
    if (ctx > topk_) {
      const KvCache& cache = s.state->kv();
      hist.resize(static_cast<size_t>(ctx * dim_));
      cache.read_f32(kv_slot_, 0, 0, 0, ctx, hist.data());
    }
    ThreadPool::global().parallel_for(s.n, [&](int64_t j0, int64_t j1, int) {
      std::vector<float> score(static_cast<size_t>(ctx));
      std::vector<int32_t> order(static_cast<size_t>(ctx));
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t i = s.row0 + j, pos = s.pos0 + j;
        int32_t* row = sel + i * topk_;
        if (pos + 1 <= topk_) {  // below the budget: every past position
          std::iota(row, row + pos + 1, 0);
          continue;
        }
        const float* qi = q.data() + i * qd;
        const float* wi = w.data() + i * heads_;
        for (int64_t u = 0; u <= pos; ++u) {
          const float* ku = hist.data() + u * dim_;
          float sc = 0;
          for (int64_t h = 0; h < heads_; ++h) sc += wi[h] * std::max(dot_lanes(qi + h * dim_, ku, dim_) * scale, 0.0f);
          score[static_cast<size_t>(u)] = sc;
        }
        std::iota(order.begin(), order.begin() + pos + 1, 0);
        std::partial_sort(order.begin(), order.begin() + topk_, order.begin() + pos + 1, [&](int32_t a, int32_t b) {
          return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)] ||
                 (score[static_cast<size_t>(a)] == score[static_cast<size_t>(b)] && a < b);
        });
        std::copy_n(order.begin(), topk_, row);
        std::sort(row, row + topk_);
      }
    });
  }
}

}  // namespace fp4lm::model
