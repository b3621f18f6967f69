#include "model/layers/block_sparse_attention.h"

#include <algorithm>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "model/state/kv_cache.h"
#include "model/load/model_loader.h"
#include "model/state/sequence_state.h"

namespace fp4lm::model {

BlockSparseAttention::BlockSparseAttention(const LayerBuild& b, int64_t layer, const LightningIndexerNames& names,
                                           const LightningIndexerConfig& cfg) {
  const ModelConfig& c = b.loader.config();
  num_heads_ = c.num_heads;
  num_kv_heads_ = c.num_kv_heads;
  head_dim_ = c.head_dim;
  if (num_heads_ % cfg.heads != 0)
    fail("layer {}: {} attention heads do not group over the lightning indexer's {} heads (index_n_heads)", layer,
         num_heads_, cfg.heads);
  attn_ = std::make_unique<Attention>(b, layer);  // declares the K/V slot first: kv_slot_of_layer finds it
  indexer_ = std::make_unique<LightningIndexer>(b, layer, names, cfg);
}

void BlockSparseAttention::forward(const float* x, std::span<const SequenceSpan> spans, float* y) const {
  const std::vector<KeyBlockSelection> sel = indexer_->select(x, spans);
  std::vector<AttentionSpan> a;
  a.reserve(spans.size());
  for (const SequenceSpan& s : spans)
    a.push_back({&s.state->kv(), s.row0, s.n, s.pos0, s.chunk_end, s.rope_pos, s.rope_delta, nullptr});
  const int64_t H = num_heads_, hd = head_dim_, qd = H * hd;
  const int64_t per_index_head = H / indexer_->config().heads, per_kv_head = H / num_kv_heads_;
  const int64_t B = indexer_->config().block_size;
  auto core = [&](std::span<const AttentionSpan> sp, int64_t slot, const float* q, float* out) {
    // The dense rows are a prefix of each span (positions below topk_blocks × block_size).
    std::vector<std::pair<const AttentionSpan*, int64_t>> sparse;  // (span, row)
    for (const AttentionSpan& s : sp) {
      int64_t d = 0;
      while (d < s.n && sel[static_cast<size_t>(s.row0 + d)].dense) ++d;
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
        const int64_t i = sparse[static_cast<size_t>(u)].second, pos = s.pos0 + (i - s.row0);
        const KeyBlockSelection& ks = sel[static_cast<size_t>(i)];
        int64_t gathered_g = -1, gathered_kvh = -1, n = 0;
        for (int64_t h = 0; h < H; ++h) {
          const int64_t g = h / per_index_head, kvh = h / per_kv_head;
          if (g != gathered_g || kvh != gathered_kvh) {  // the kept causal keys of this group, in position order
            keys.clear();
            values.clear();
            n = 0;
            for (int64_t e = 0; e < ks.k; ++e) {
              const int64_t blk = ks.blocks[static_cast<size_t>(g * ks.k + e)];
              for (int64_t t = blk * B; t < std::min((blk + 1) * B, pos + 1); ++t, ++n) {
                keys.resize(static_cast<size_t>((n + 1) * hd));
                values.resize(keys.size());
                s.cache->read_f32(slot, 0, kvh, t, 1, keys.data() + n * hd);
                s.cache->read_f32(slot, 1, kvh, t, 1, values.data() + n * hd);
              }
            }
            gathered_g = g;
            gathered_kvh = kvh;
          }
          kernels::attend_gathered(kern, q + i * qd + h * hd, keys.data(), values.data(), n, hd, out + i * qd + h * hd);
        }
      }
    });
  };
  attn_->forward(x, std::span<const AttentionSpan>(a), y, core);
}

}  // namespace fp4lm::model
