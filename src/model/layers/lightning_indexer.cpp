#include "model/layers/lightning_indexer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/layers/activation.h"
#include "model/state/kv_cache.h"
#include "model/load/model_loader.h"
#include "model/layers/rope.h"
#include "model/state/sequence_state.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

LightningIndexer::LightningIndexer(const LayerBuild& b, int64_t layer, const LightningIndexerNames& names,
                                   const LightningIndexerConfig& cfg)
    : cfg_(cfg), rope_(b.rope), act_(b.loader.dtype()) {
  if (cfg.heads <= 0 || cfg.head_dim <= 0 || cfg.head_dim % 2 != 0 || cfg.block_size <= 0 || cfg.topk_blocks <= 0 ||
      cfg.local_blocks < 0)
    fail("layer {}: invalid lightning indexer (heads {}, head_dim {} (even), block_size {}, topk_blocks {}, "
         "local_blocks {})",
         layer, cfg.heads, cfg.head_dim, cfg.block_size, cfg.topk_blocks, cfg.local_blocks);
  q_ = b.loader.load_linear(names.q_proj);
  k_ = b.loader.load_linear(names.k_proj);
  q_norm_ = load_rms_norm(b.loader, names.q_norm, cfg.head_dim);
  k_norm_ = load_rms_norm(b.loader, names.k_norm, cfg.head_dim);
  if (b.state.kv_quant() != KvQuant::none)
    fail("layer {}: the checkpoint declares a {} KV cache, but the lightning indexer's keys are a key-only slot, "
         "which fp4lm stores only in a float dtype or FP8; pass --kv-cache-dtype (bfloat16, float16, float32 or fp8)",
         layer, kv_quant_name(b.state.kv_quant()));
  // One key head; with an FP8 cache its codes are scaled by 1 (the keys are RMS-normalized).
  kv_slot_ = b.state.add_kv(layer, KvSlotShape{.kv_heads = 1, .head_dim = cfg.head_dim, .window = 0, .key_only = true});
}

void LightningIndexer::rotate(float* x, int64_t n, int64_t pos) const {
  const int64_t r = rope_.head_dim(), half = r / 2;
  std::vector<float> ch(static_cast<size_t>(half)), sh(ch.size());
  rope_.cos_sin(pos, ch.data(), sh.data());
  // HF's cos is cat(freqs, freqs) cut to the indexer's head_dim: entry j is frequency j mod half.
  const int64_t rd = std::min(cfg_.head_dim, r), h2 = rd / 2;
  for (int64_t h = 0; h < n; ++h) {
    float* v = x + h * cfg_.head_dim;
    for (int64_t j = 0; j < h2; ++j) {
      const float a = v[j], b = v[j + h2];
      const size_t lo = static_cast<size_t>(j % half), hi = static_cast<size_t>((j + h2) % half);
      v[j] = a * ch[lo] - b * sh[lo];
      v[j + h2] = b * ch[hi] + a * sh[hi];
    }
  }
}

std::vector<KeyBlockSelection> LightningIndexer::select(const float* x, std::span<const SequenceSpan> spans) const {
  const int64_t H = cfg_.heads, D = cfg_.head_dim, B = cfg_.block_size;
  int64_t m = 0;
  for (const SequenceSpan& s : spans) m += s.n;
  std::vector<float> q(static_cast<size_t>(m * H * D)), k(static_cast<size_t>(m * D));
  q_->forward(x, m, q.data());
  k_->forward(x, m, k.data());
  q_norm_.forward(q.data(), m * H, q.data(), act_);
  k_norm_.forward(k.data(), m, k.data(), act_);
  for (const SequenceSpan& s : spans)
    for (int64_t j = 0; j < s.n; ++j) {
      const int64_t i = s.row0 + j, pos = s.pos0 + j;
      rotate(q.data() + i * H * D, H, pos + s.rope_delta);
      rotate(k.data() + i * D, 1, pos + s.rope_delta);
      round_to_dtype(q.data() + i * H * D, static_cast<size_t>(H * D), act_);
      round_to_dtype(k.data() + i * D, static_cast<size_t>(D), act_);
      s.state->kv().store(kv_slot_, pos, k.data() + i * D, nullptr);
    }

  std::vector<KeyBlockSelection> out(static_cast<size_t>(m));
  const float inf = std::numeric_limits<float>::infinity();
  for (const SequenceSpan& s : spans) {
    const int64_t last = s.pos0 + s.n - 1;
    if (last / B + 1 <= cfg_.topk_blocks) continue;  // every row of the span dense
    // The span's key history as stored (so FP8 / 16-bit rounding included), float32.
    const KvCache& cache = s.state->kv();
    std::vector<float> keys(static_cast<size_t>((last + 1) * D));
    cache.read_f32(kv_slot_, 0, 0, 0, last + 1, keys.data());
    // Rows in parallel: each writes only its own selection.
    ThreadPool::global().parallel_for(s.n, [&](int64_t j0, int64_t j1, int) {
      std::vector<float> block;
      std::vector<int32_t> order;
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t i = s.row0 + j, pos = s.pos0 + j, nb = pos / B + 1;
        if (nb <= cfg_.topk_blocks) continue;
        KeyBlockSelection& sel = out[static_cast<size_t>(i)];
        sel.dense = false;
        sel.k = cfg_.topk_blocks;
        sel.blocks.resize(static_cast<size_t>(H * sel.k));
        for (int64_t h = 0; h < H; ++h) {
          const float* qh = q.data() + (i * H + h) * D;
          block.assign(static_cast<size_t>(nb), -inf);
          for (int64_t t = 0; t <= pos; ++t) {
            const float* kt = keys.data() + t * D;
            float d = 0.0f;
            for (int64_t c = 0; c < D; ++c) d += qh[c] * kt[c];
            float& bm = block[static_cast<size_t>(t / B)];
            bm = std::max(bm, d);
          }
          // The local blocks (the query's own and the ones before it, clamped at 0) always win.
          for (int64_t l = 0; l < cfg_.local_blocks; ++l)
            block[static_cast<size_t>(std::max<int64_t>(nb - 1 - l, 0))] = inf;
          order.resize(static_cast<size_t>(nb));
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b2) {
            return block[static_cast<size_t>(a)] > block[static_cast<size_t>(b2)];
          });
          int32_t* dst = sel.blocks.data() + h * sel.k;
          std::copy_n(order.begin(), sel.k, dst);
          std::sort(dst, dst + sel.k);
        }
      }
    });
  }
  return out;
}

}  // namespace fp4lm::model
