#include "model/layers/compressed_attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/reference/math.h"
#include "model/layers/activation.h"
#include "model/layer_build.h"
#include "model/load/model_loader.h"
#include "model/layers/row_ops.h"
#include "model/state/sequence_state.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

namespace {

// Interleaved RoPE on the trailing rope_dim values of x (pairs (2i, 2i+1) rotate by angle i;
// HF apply_rotary_pos_emb with its repeat_interleave'd cos / sin); `sign` -1 rotates back.
void rotate_tail(float* x, int64_t dim, int64_t rope_dim, const float* cos, const float* sin, float sign = 1.0f) {
  float* r = x + dim - rope_dim;
  for (int64_t i = 0; i < rope_dim / 2; ++i) {
    const float a = r[2 * i], b = r[2 * i + 1], s = sign * sin[i];
    r[2 * i] = a * cos[i] - b * s;
    r[2 * i + 1] = b * cos[i] + a * s;
  }
}

// x / rms(x) over dim values, no weight (HF DeepseekV4UnweightedRMSNorm).
void unweighted_rms(float* x, int64_t dim, double eps) {
  float ss = 0;
  for (int64_t k = 0; k < dim; ++k) ss += x[k] * x[k];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(dim) + static_cast<float>(eps));
  for (int64_t k = 0; k < dim; ++k) x[k] *= inv;
}

// wo_a (its report and weights) runs as one NVFP4 W4A16 kernel per group of `rows` / groups rows.
bool wo_a_grouped(const LayerReport& r, const kernels::LinearWeights& w, int64_t rows) {
  return r.scheme.key == kernels::kNvfp4W4A16 && w.shards.size() == 1 && w.bias.empty() && w.n == rows;
}

RmsNorm norm_once(const ModelLoader& l, const std::string& name, int64_t dim) {
  // V4's norms multiply the float32 weight and round once.
  return RmsNorm(l.tensor_f32(name, {dim}), l.config().rms_norm_eps, /*round_once=*/true);
}

std::unique_ptr<CompressedAttention::Compressor> load_compressor(ModelLoader& l, const std::string& p, int64_t dim,
                                                                 int64_t rate, bool overlap) {
  auto c = std::make_unique<CompressedAttention::Compressor>();
  c->wkv = l.load_linear(p + ".wkv");
  c->wgate = l.load_linear(p + ".wgate");
  c->dim = dim;
  c->rate = rate;
  c->overlap = overlap;
  c->ape = l.tensor_f32(p + ".ape", {rate, (overlap ? 2 : 1) * dim});
  c->norm = norm_once(l, p + ".norm.weight", dim);
  return c;
}

}  // namespace

void CompressedAttention::Compressor::advance(KvCache& cache, const float* x, int64_t pos0, int64_t n, const Rope& rope,
                                              int64_t rope_dim, DType act) const {
  const int64_t cw = width();
  std::vector<float> kv(static_cast<size_t>(n * cw)), gate(kv.size());
  wkv->forward(x, n, kv.data());
  wgate->forward(x, n, gate.data());
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < cw; ++k)
      gate[static_cast<size_t>(t * cw + k)] += ape[static_cast<size_t>(((pos0 + t) % rate) * cw + k)];
  round_to_dtype(gate.data(), gate.size(), act);
  std::vector<float> row(static_cast<size_t>(2 * cw));
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(kv.data() + t * cw, cw, row.data());
    std::copy_n(gate.data() + t * cw, cw, row.data() + cw);
    cache.store(tail_slot, pos0 + t, row.data(), nullptr);
  }
  // The windows that complete in these rows: w with (w + 1)·rate - 1 in [pos0, pos0 + n).
  const int64_t w0 = pos0 / rate, w1 = (pos0 + n) / rate;
  if (w1 <= w0) return;
  const int64_t span = (overlap ? 2 : 1) * rate;
  std::vector<float> rows(static_cast<size_t>(span * 2 * cw)), out(static_cast<size_t>((w1 - w0) * dim));
  std::vector<float> g(static_cast<size_t>(span)), v(g.size());
  std::vector<float> cos(static_cast<size_t>(rope_dim / 2)), sin(cos.size());
  for (int64_t w = w0; w < w1; ++w) {
    // Window w-1's rows (CSA, w > 0: its first series) then window w's, read back from the ring.
    const int64_t first = overlap && w > 0 ? (w - 1) * rate : w * rate, count = (w + 1) * rate - first;
    for (int64_t p = first; p < first + count; ++p)
      cache.read_f32(tail_slot, 0, 0, cache.row_of(tail_slot, p), 1, rows.data() + (p - first) * 2 * cw);
    const int64_t own = count - rate;  // rows of window w-1 (0 or rate)
    float* e = out.data() + (w - w0) * dim;
    for (int64_t d = 0; d < dim; ++d) {
      int64_t used = 0;
      for (int64_t r = 0; r < own; ++r, ++used) {  // window w-1's first series
        g[used] = rows[static_cast<size_t>(r * 2 * cw + cw + d)];
        v[used] = rows[static_cast<size_t>(r * 2 * cw + d)];
      }
      const int64_t off = overlap ? dim : 0;  // window w's second series (HCA: its only one)
      for (int64_t r = own; r < count; ++r, ++used) {
        g[used] = rows[static_cast<size_t>(r * 2 * cw + cw + off + d)];
        v[used] = rows[static_cast<size_t>(r * 2 * cw + off + d)];
      }
      float mx = -INFINITY;
      for (int64_t k = 0; k < used; ++k) mx = std::max(mx, g[k]);
      float sum = 0;
      for (int64_t k = 0; k < used; ++k) sum += g[k] = std::exp(g[k] - mx);
      float acc = 0;
      for (int64_t k = 0; k < used; ++k) acc += v[k] * (g[k] / sum);
      e[d] = acc;
    }
  }
  round_to_dtype(out.data(), out.size(), act);
  norm.forward(out.data(), w1 - w0, out.data(), act);
  for (int64_t w = w0; w < w1; ++w) {
    rope.cos_sin(w * rate, cos.data(), sin.data());
    rotate_tail(out.data() + (w - w0) * dim, dim, rope_dim, cos.data(), sin.data());
  }
  round_to_dtype(out.data(), out.size(), act);
  for (int64_t w = w0; w < w1; ++w) cache.store(entry_slot, w * rate, out.data() + (w - w0) * dim, nullptr);
}

size_t deepseek_v4_wo_a_float_bytes(const ModelLoader& l, int64_t layer) {
  const DeepseekV4Config& v = l.config().deepseek_v4;
  const LayerSpec& s = l.layer(fmt::format("model.layers.{}.attn.wo_a", layer));
  const LayerReport r = l.describe(s);
  const kernels::LinearWeights w = l.linear_weights(s, r.scheme);
  return wo_a_grouped(r, w, v.o_groups * v.o_lora_rank) ? 0 : static_cast<size_t>(w.n * w.k) * sizeof(float);
}

CompressedAttention::CompressedAttention(const LayerBuild& b, int64_t layer) : layer_(layer) {
  ModelLoader& l = b.loader;
  const ModelConfig& c = l.config();
  const DeepseekV4Config& v = c.deepseek_v4;
  hidden_ = c.hidden_size;
  heads_ = c.num_heads;
  dim_ = c.head_dim;
  rope_dim_ = v.rope_dim;
  window_ = v.sliding_window;
  q_lora_ = v.q_lora_rank;
  groups_ = v.o_groups;
  o_lora_ = v.o_lora_rank;
  act_ = l.dtype();
  eps_ = c.rms_norm_eps;
  const DeepseekV4Config::Attn a = v.attn[static_cast<size_t>(layer)];
  kind_ = a == DeepseekV4Config::Attn::sliding ? 0 : a == DeepseekV4Config::Attn::csa ? 1 : 2;
  const std::string p = fmt::format("model.layers.{}.attn", layer);
  wq_a_ = l.load_linear(p + ".wq_a");
  wq_b_ = l.load_linear(p + ".wq_b");
  wkv_ = l.load_linear(p + ".wkv");
  wo_b_ = l.load_linear(p + ".wo_b");
  {  // wo_a is a grouped projection (group g: its o_lora rows on its slice of the heads' outputs).
    const LayerSpec& s = l.layer(p + ".wo_a");
    const LayerReport r = l.describe(s);
    kernels::LinearWeights w = l.linear_weights(s, r.scheme);
    if (wo_a_grouped(r, w, groups_ * o_lora_)) {
      // NVFP4 rows are k/2 code bytes and k/16 scale bytes each: group g's rows are a pointer offset.
      const kernels::Nvfp4View& v = w.shards.front().as<kernels::Nvfp4View>();
      for (int64_t g = 0; g < groups_; ++g) {
        kernels::Nvfp4View vg = v;
        vg.codes = v.codes + g * o_lora_ * w.k / 2;
        vg.block_scales = v.block_scales + g * o_lora_ * w.k / 16;
        kernels::LinearWeights wg;
        wg.key = w.key;
        wg.n = o_lora_;
        wg.k = w.k;
        wg.keepalive = w.keepalive;
        wg.shards.push_back(kernels::WeightShard{fmt::format("{} (group {})", w.shards.front().name, g), o_lora_, vg});
        LayerSpec sg = s;
        sg.name = fmt::format("{} (group {})", s.name, g);
        sg.shard_rows = {o_lora_};
        sg.out_features = o_lora_;
        const kernels::LinearProblem pr{r.scheme.key, r.scheme.act_dtype, o_lora_, w.k, {}};
        wo_a_groups_.push_back(std::make_unique<Linear>(sg, r.scheme, r.selection.backend->name,
                                                        r.selection.backend->make_linear(std::move(wg), pr)));
      }
    } else {
      wo_a_.resize(static_cast<size_t>(w.n * w.k));
      for (int64_t row = 0; row < w.n; ++row) kernels::reference_weight_row(w, row, wo_a_.data() + row * w.k);
    }
  }
  q_norm_ = norm_once(l, p + ".q_norm.weight", q_lora_);
  kv_norm_ = norm_once(l, p + ".norm.weight", dim_);
  sinks_ = l.tensor_f32(p + ".attn_sink", {heads_});
  rope_ = kind_ == 0 ? Rope(rope_dim_, v.main_theta, v.main_scaling) : Rope(rope_dim_, v.compress_theta, v.compress_scaling);
  if (kind_ != 0) {
    const int64_t rate = kind_ == 1 ? v.csa_rate : v.hca_rate;
    comp_ = load_compressor(l, p + ".compressor", dim_, rate, kind_ == 1);
  }
  if (kind_ == 1) {
    index_heads_ = v.index_heads;
    index_dim_ = v.index_head_dim;
    index_topk_ = v.index_topk;
    index_comp_ = load_compressor(l, p + ".indexer.compressor", index_dim_, v.csa_rate, true);
    index_wq_b_ = l.load_linear(p + ".indexer.wq_b");
    index_weights_ = l.load_linear(p + ".indexer.weights_proj");
  }
  if (b.state.kv_quant() != KvQuant::none || b.kv_dtype == DType::F8_E4M3)
    fail("layer {}: DeepSeek-V4's attention keeps its window K=V, compressor rows and compressed entries in a float "
         "KV cache (bfloat16, float16 or float32); pass --kv-cache-dtype with one of them",
         layer);
  // The window's K=V: a ring of its window. Each compressor: a ring of the rows its next entry
  // pools ([kv | gate + ape] of the last rate positions, CSA: 2·rate), and one entry per rate
  // positions (model/state/kv_cache.h's stride).
  window_slot_ = b.state.add_kv(layer, KvSlotShape{.kv_heads = 1, .head_dim = dim_, .window = window_, .key_only = true});
  for (Compressor* k : {comp_.get(), index_comp_.get()}) {
    if (!k) continue;
    k->tail_slot = b.state.add_kv(
        layer, KvSlotShape{.kv_heads = 1, .head_dim = 2 * k->width(), .window = (k->overlap ? 2 : 1) * k->rate,
                           .key_only = true});
    k->entry_slot =
        b.state.add_kv(layer, KvSlotShape{.kv_heads = 1, .head_dim = k->dim, .window = 0, .key_only = true, .stride = k->rate});
  }
}

size_t CompressedAttention::weight_bytes() const {
  size_t b = wq_a_->weight_bytes() + wq_b_->weight_bytes() + wkv_->weight_bytes() + wo_b_->weight_bytes();
  for (const auto& g : wo_a_groups_) b += g->weight_bytes();
  for (const Compressor* k : {comp_.get(), index_comp_.get()})
    if (k) b += k->wkv->weight_bytes() + k->wgate->weight_bytes();
  if (index_wq_b_) b += index_wq_b_->weight_bytes() + index_weights_->weight_bytes();
  return b;
}

size_t CompressedAttention::own_param_bytes() const {
  size_t f = wo_a_.size() + sinks_.size() + static_cast<size_t>(q_norm_.dim() + kv_norm_.dim());
  for (const Compressor* k : {comp_.get(), index_comp_.get()})
    if (k) f += k->ape.size() + static_cast<size_t>(k->norm.dim());
  return f * sizeof(float);
}

void CompressedAttention::forward(const float* x, std::span<const SequenceSpan> spans, float* y) const {
  const int64_t qd = heads_ * dim_, half = rope_dim_ / 2;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dim_));
  for (const SequenceSpan& s : spans) {
    KvCache& cache = s.state->kv();
    const int64_t ctx = s.pos0 + s.n, n = s.n;
    const float* xs = x + s.row0 * hidden_;

    // Queries: q_norm(wq_a(x)) is also the indexer's query latent.
    std::vector<float> qres(static_cast<size_t>(n * q_lora_)), q(static_cast<size_t>(n * qd));
    wq_a_->forward(xs, n, qres.data());
    q_norm_.forward(qres.data(), n, qres.data(), act_);
    wq_b_->forward(qres.data(), n, q.data());
    std::vector<float> cos(static_cast<size_t>(half)), sin(cos.size());
    for (int64_t j = 0; j < n; ++j) {
      rope_.cos_sin(s.pos0 + j, cos.data(), sin.data());
      for (int64_t h = 0; h < heads_; ++h) {
        float* qh = q.data() + j * qd + h * dim_;
        unweighted_rms(qh, dim_, eps_);
        rotate_tail(qh, dim_, rope_dim_, cos.data(), sin.data());
      }
    }
    round_to_dtype(q.data(), q.size(), act_);

    // The new rows' K=V into the window ring, then the window positions [lo, ctx) back from it.
    {
      std::vector<float> kvn(static_cast<size_t>(n * dim_));
      wkv_->forward(xs, n, kvn.data());
      kv_norm_.forward(kvn.data(), n, kvn.data(), act_);
      for (int64_t j = 0; j < n; ++j) {
        rope_.cos_sin(s.pos0 + j, cos.data(), sin.data());
        rotate_tail(kvn.data() + j * dim_, dim_, rope_dim_, cos.data(), sin.data());
      }
      round_to_dtype(kvn.data(), kvn.size(), act_);
      for (int64_t j = 0; j < n; ++j) cache.store(window_slot_, s.pos0 + j, kvn.data() + j * dim_, nullptr);
    }
    const int64_t lo = std::max<int64_t>(0, s.pos0 - window_ + 1), nk = ctx - lo;
    std::vector<float> kv(static_cast<size_t>(nk * dim_));
    for (int64_t p = lo; p < ctx; ++p)
      cache.read_f32(window_slot_, 0, 0, cache.row_of(window_slot_, p), 1, kv.data() + (p - lo) * dim_);

    // The compressors take the new rows (entries of the windows they complete), then the
    // complete entries: all of them on HCA layers; on CSA layers the indexer's keys (the
    // attention reads only the entries it picks).
    std::vector<float> comp, index_keys, index_q, index_w;
    const int64_t rate = comp_ ? comp_->rate : 1, n_win = comp_ ? ctx / rate : 0;
    if (comp_) comp_->advance(cache, xs, s.pos0, n, rope_, rope_dim_, act_);
    if (comp_ && !index_comp_ && n_win > 0) {
      comp.resize(static_cast<size_t>(n_win * dim_));
      cache.read_f32(comp_->entry_slot, 0, 0, 0, n_win, comp.data());
    }
    if (index_comp_) {
      index_comp_->advance(cache, xs, s.pos0, n, rope_, rope_dim_, act_);
      index_keys.resize(static_cast<size_t>(n_win * index_dim_));
      if (n_win > 0) cache.read_f32(index_comp_->entry_slot, 0, 0, 0, n_win, index_keys.data());
      index_q.resize(static_cast<size_t>(n * index_heads_ * index_dim_));
      index_wq_b_->forward(qres.data(), n, index_q.data());
      for (int64_t j = 0; j < n; ++j) {
        rope_.cos_sin(s.pos0 + j, cos.data(), sin.data());
        for (int64_t h = 0; h < index_heads_; ++h)
          rotate_tail(index_q.data() + (j * index_heads_ + h) * index_dim_, index_dim_, rope_dim_, cos.data(),
                      sin.data());
      }
      round_to_dtype(index_q.data(), index_q.size(), act_);
      index_w.resize(static_cast<size_t>(n * index_heads_));
      index_weights_->forward(xs, n, index_w.data());
    }

    std::vector<float> attn(static_cast<size_t>(n * qd));
    for (int64_t j = 0; j < n; ++j) {
      const int64_t pos = s.pos0 + j;
      // Keys: the window (positions max(0, pos - window + 1) .. pos), then the compressed entries
      // this query sees (w < (pos + 1) / rate; on CSA layers the indexer's index_topk best of them).
      std::vector<const float*> keys;
      for (int64_t u = std::max<int64_t>(lo, pos - window_ + 1); u <= pos; ++u) keys.push_back(kv.data() + (u - lo) * dim_);
      const int64_t causal = comp_ ? std::min(n_win, (pos + 1) / rate) : 0;
      std::vector<int64_t> chosen(static_cast<size_t>(causal));
      std::iota(chosen.begin(), chosen.end(), 0);
      if (index_comp_ && causal > index_topk_) {
        std::vector<float> score(static_cast<size_t>(causal), 0.0f);
        const float sm = 1.0f / std::sqrt(static_cast<float>(index_dim_));
        const float wscale = 1.0f / std::sqrt(static_cast<float>(index_heads_));
        for (int64_t w = 0; w < causal; ++w) {
          float acc = 0;
          for (int64_t h = 0; h < index_heads_; ++h) {
            const float* qh = index_q.data() + (j * index_heads_ + h) * index_dim_;
            float d = 0;
            for (int64_t k = 0; k < index_dim_; ++k) d += qh[k] * index_keys[static_cast<size_t>(w * index_dim_ + k)];
            acc += std::max(d, 0.0f) * sm * (index_w[static_cast<size_t>(j * index_heads_ + h)] * wscale);
          }
          score[static_cast<size_t>(w)] = acc;
        }
        std::partial_sort(chosen.begin(), chosen.begin() + index_topk_, chosen.end(),
                          [&](int64_t a, int64_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
        chosen.resize(static_cast<size_t>(index_topk_));
      }
      std::vector<float> picked;  // CSA: the chosen entries, read from the cache
      if (index_comp_) {
        picked.resize(chosen.size() * static_cast<size_t>(dim_));
        for (size_t u = 0; u < chosen.size(); ++u)
          cache.read_f32(comp_->entry_slot, 0, 0, chosen[u], 1, picked.data() + u * static_cast<size_t>(dim_));
        for (size_t u = 0; u < chosen.size(); ++u) keys.push_back(picked.data() + u * static_cast<size_t>(dim_));
      } else {
        for (int64_t w : chosen) keys.push_back(comp.data() + w * dim_);
      }
      // The heads in parallel: each head's scores, softmax and sum run on one thread in a fixed
      // order (dot_lanes: the order depends on dim only), so the split never changes a bit.
      const size_t nkeys = keys.size();
      ThreadPool::global().parallel_for(heads_, [&](int64_t h0, int64_t h1, int) {
        std::vector<float> p(nkeys);
        for (int64_t h = h0; h < h1; ++h) {
          const float* qh = q.data() + j * qd + h * dim_;
          float mx = sinks_[static_cast<size_t>(h)];
          for (size_t u = 0; u < nkeys; ++u) {
            p[u] = dot_lanes(qh, keys[u], dim_) * scale;
            mx = std::max(mx, p[u]);
          }
          float sum = std::exp(sinks_[static_cast<size_t>(h)] - mx);
          for (size_t u = 0; u < nkeys; ++u) sum += p[u] = std::exp(p[u] - mx);
          float* o = attn.data() + j * qd + h * dim_;
          std::fill(o, o + dim_, 0.0f);
          for (size_t u = 0; u < nkeys; ++u) {
            const float w = p[u] / sum;
            const float* ku = keys[u];
            for (int64_t k = 0; k < dim_; ++k) o[k] += w * ku[k];
          }
        }
      });
      // K=V carried each key's rotation into the output: rotate back by the query's angle.
      rope_.cos_sin(pos, cos.data(), sin.data());
      for (int64_t h = 0; h < heads_; ++h)
        rotate_tail(attn.data() + j * qd + h * dim_, dim_, rope_dim_, cos.data(), sin.data(), -1.0f);
    }
    round_to_dtype(attn.data(), attn.size(), act_);

    // Grouped output: group g's heads·dim / groups values through its o_lora rows of wo_a, then wo_b.
    const int64_t gin = qd / groups_;
    const int64_t rows = groups_ * o_lora_;
    std::vector<float> mid(static_cast<size_t>(n * rows));
    if (!wo_a_groups_.empty()) {
      // Each group's kernel on its slice of every token, gathered contiguous.
      std::vector<float> xg(static_cast<size_t>(n * gin)), yg(static_cast<size_t>(n * o_lora_));
      for (int64_t g = 0; g < groups_; ++g) {
        for (int64_t j = 0; j < n; ++j) std::copy_n(attn.data() + j * qd + g * gin, gin, xg.data() + j * gin);
        wo_a_groups_[static_cast<size_t>(g)]->forward(xg.data(), n, yg.data());
        for (int64_t j = 0; j < n; ++j) std::copy_n(yg.data() + j * o_lora_, o_lora_, mid.data() + j * rows + g * o_lora_);
      }
    } else {
      // Row r of wo_a (group r / o_lora) against every token's slice: the weights (float32) are
      // read once per call, the rows split over the pool.
      ThreadPool::global().parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* w = wo_a_.data() + r * gin;
          const int64_t g = r / o_lora_;
          for (int64_t j = 0; j < n; ++j)
            mid[static_cast<size_t>(j * rows + r)] = dot_lanes(w, attn.data() + j * qd + g * gin, gin);
        }
      });
    }
    round_to_dtype(mid.data(), mid.size(), act_);
    wo_b_->forward(mid.data(), n, y + s.row0 * hidden_);
  }
}

}  // namespace fp4lm::model
