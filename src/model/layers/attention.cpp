#include "model/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "kernels/attention.h"
#include "model/layers/activation.h"
#include "model/state/kv_cache_scale.h"
#include "model/load/model_loader.h"
#include "model/state/sequence_state.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

void causal_attention(std::span<const AttentionSpan> spans, int64_t layer, const float* q, int64_t num_heads,
                      float* out, ThreadPool& pool, const kernels::AttentionKernel* kernel, const float* sinks) {
  if (spans.empty()) return;
  const kernels::AttentionKernel& kern = kernel ? *kernel : kernels::attention_kernel();
  const int64_t hd = spans[0].cache->head_dim(layer), kvh = spans[0].cache->num_kv_heads(layer);
  if (num_heads % kvh != 0) fail("attention: {} heads do not group over {} KV heads", num_heads, kvh);
  // Per row: its span (rows of one span are consecutive, the spans' rows in order); per span:
  // its first row.
  std::vector<int64_t> row_span, span_row0;
  int64_t row = 0;
  for (size_t si = 0; si < spans.size(); ++si) {
    const AttentionSpan& s = spans[si];
    if (s.pos0 < 0 || s.pos0 + s.n > s.cache->capacity())
      fail("attention: positions [{}, {}) exceed the KV cache capacity {}", s.pos0, s.pos0 + s.n,
           s.cache->capacity());
    if (s.cache->head_dim(layer) != hd || s.cache->num_kv_heads(layer) != kvh)
      fail("attention: caches of different shapes in one batch");
    if (s.cache->window(layer) != spans[0].cache->window(layer))
      fail("attention: caches of different windows in one batch");
    if (s.bidir_end)
      for (int64_t j = 0; j < s.n; ++j)
        if (s.bidir_end[j] >= s.pos0 + s.n)
          fail("attention: the row at position {} attends up to position {}, past the {} positions this call "
               "stores (an image's bidirectional tokens cut across forward steps)",
               s.pos0 + j, s.bidir_end[j], s.pos0 + s.n);
    for (int64_t i = 0; i < s.n; ++i) row_span.push_back(static_cast<int64_t>(si));
    span_row0.push_back(row);
    row += s.n;
  }
  const int64_t m = row, group = num_heads / kvh, qd = num_heads * hd;
  // Tasks (KV head g, row i), g-major: a thread's contiguous range becomes a few kernel calls,
  // each one KV head over consecutive rows of one sequence. Each (row, query head) is computed
  // the same way whatever the split (kernels/attention.h), so results do not depend on it.
  const bool windowed = spans[0].cache->window(layer) > 0;
  pool.parallel_for(m * kvh, [&](int64_t begin, int64_t end, int) {
    for (int64_t task = begin; task < end;) {
      const int64_t g = task / m, i = task % m;
      const size_t si = static_cast<size_t>(row_span[static_cast<size_t>(i)]);
      const AttentionSpan& s = spans[si];
      const int64_t r0 = span_row0[si];
      // The last position row j of the span reads: its own, or further within its image block.
      const auto last_key = [&](int64_t j) { return s.bidir_end ? std::max(s.pos0 + j, s.bidir_end[j]) : s.pos0 + j; };
      const bool bidir = last_key(i - r0) > s.pos0 + (i - r0);
      int64_t rows = windowed || bidir ? 1 : std::min({end - task, r0 + s.n - i});
      if (s.bidir_end && rows > 1)  // a run of causal rows stops before the next bidirectional one
        for (int64_t j = 1; j < rows; ++j)
          if (last_key(i - r0 + j) > s.pos0 + (i - r0 + j)) {
            rows = j;
            break;
          }
      const KvCache& cache = *s.cache;
      kernels::AttentionCall c;
      c.q = q + i * qd + g * group * hd;
      c.q_stride = qd;
      c.out = out + i * qd + g * group * hd;
      c.out_stride = qd;
      c.rows = rows;
      c.pos0 = last_key(i - r0);  // a bidirectional row placed at its block's end: it sees every key up to it
      c.group = group;
      c.head_dim = hd;
      c.kv_dtype = cache.dtype();
      c.keys = cache.keys(layer, g);
      c.values = cache.values(layer, g);
      c.k_scale = cache.k_scale(layer);
      c.v_scale = cache.v_scale(layer);
      if (sinks) c.sinks = sinks + g * group;
      if (windowed) {
        // One row: its window [lo, last key] as positions 0 .. last - lo, read in place on the ring
        // (the window's start is its own position's, also for a bidirectional row).
        const int64_t pos = s.pos0 + (i - r0), lo = std::max<int64_t>(0, pos - cache.window(layer) + 1);
        c.ring_first = cache.row_of(layer, lo);
        c.ring_rows = cache.rows(layer);
        c.pos0 = c.pos0 - lo;
      }
      if (cache.quant(layer) != KvQuant::none) {
        // A quantized cache: the rows this call reads (the whole ring of a window, else positions
        // [0, pos0 + rows)) dequantized to float32, which the kernel then reads as an F32 cache.
        // Each row's values depend on that row alone, so results stay independent of the batch.
        thread_local std::vector<float> kd, vd;
        const int64_t n = windowed ? cache.rows(layer) : c.pos0 + rows;
        kd.resize(static_cast<size_t>(n * hd));
        vd.resize(kd.size());
        cache.dequantize(layer, 0, g, 0, n, kd.data());
        cache.dequantize(layer, 1, g, 0, n, vd.data());
        c.kv_dtype = DType::F32;
        c.keys = reinterpret_cast<const uint8_t*>(kd.data());
        c.values = reinterpret_cast<const uint8_t*>(vd.data());
        c.k_scale = c.v_scale = 1.0f;
      }
      kernels::run_attention(kern, c);
      task += rows;
    }
  });
}

void causal_attention(const KvCache& cache, int64_t layer, const float* q, int64_t m, int64_t pos0,
                      int64_t num_heads, float* out, ThreadPool& pool, const kernels::AttentionKernel* kernel) {
  // The batched core only reads through the span's cache pointer.
  const AttentionSpan span{const_cast<KvCache*>(&cache), 0, m, pos0};
  causal_attention(std::span<const AttentionSpan>(&span, 1), layer, q, num_heads, out, pool, kernel);
}

Attention::Attention(const LayerBuild& b, int64_t layer, const AttentionLayout& layout)
    : layer_(layer), rope_(b.rope) {
  ModelLoader& loader = b.loader;
  // Chosen here so that a bad FP4LM_ATTENTION_KERNEL fails the load, and logged like the oracle's
  // choices.
  const kernels::AttentionKernel& kernel = kernels::attention_kernel();
  std::vector<std::string> variants;
  for (const kernels::AttentionKernel* k : kernels::attention_kernels()) variants.push_back(k->name);
  loader.log_once(fmt::format("Using '{}' attention kernel out of potential kernels: [{}]", kernel.name,
                              fmt::join(variants, ", ")));
  const ModelConfig& c = loader.config();
  num_heads_ = c.num_heads;
  num_kv_heads_ = layout.kv_heads > 0 ? layout.kv_heads : c.num_kv_heads;
  head_dim_ = layout.head_dim > 0 ? layout.head_dim : c.head_dim;
  if (num_heads_ % num_kv_heads_ != 0)
    fail("layer {}: {} attention heads do not group over {} KV heads", layer, num_heads_, num_kv_heads_);
  k_eq_v_ = layout.k_eq_v;
  v_norm_ = layout.v_norm;
  q_only_ = layout.q_only;
  image_blocks_ = layout.image_blocks;
  if (q_only_ && (layout.reads_kv_of < 0 || k_eq_v_ || v_norm_))
    fail("layer {}: an attention with queries only must read another layer's K/V", layer);
  if (v_norm_) v_rms_ = RmsNorm(std::vector<float>(static_cast<size_t>(head_dim_), 1.0f), c.rms_norm_eps, c.norm_rounds_once);
  act_ = loader.dtype();
  const std::string p = fmt::format("model.layers.{}.{}", layer, layout.module);
  rope_enabled_ = layout.rope;
  qkv_ = loader.load_linear(p + ".qkv_proj");
  if (layout.sinks) sinks_ = loader.tensor_f32(p + ".sinks", {num_heads_});
  o_ = loader.load_linear(p + ".o_proj");
  gated_ = c.attn_output_gate;
  if (layout.scaling > 0) q_mult_ = static_cast<float>(layout.scaling * std::sqrt(static_cast<double>(head_dim_)));
  qk_norm_ = c.qk_norm;
  if (qk_norm_) {
    // Per head (Qwen3), or over the whole projection (MiniMax-M2: qk_norm_full_width).
    const int64_t qn = c.qk_norm_full_width ? num_heads_ * head_dim_ : head_dim_;
    const int64_t kn = c.qk_norm_full_width ? num_kv_heads_ * head_dim_ : head_dim_;
    q_norm_ = load_rms_norm(loader, p + ".q_norm.weight", qn);
    if (!q_only_) k_norm_ = load_rms_norm(loader, p + ".k_norm.weight", kn);
  }
  KvSlotShape shape{num_kv_heads_, head_dim_, layout.window};
  // FP8: the scales of the layer that stores the K/V (this one, or the one it reads on an
  // earlier pipeline stage).
  auto read_scales = [&](const std::string& owner) {
    // A quantized cache: its scales (and NVFP4_AFFINE's biases) are part of the format, required.
    if (b.state.kv_quant() != KvQuant::none) return read_quantized_kv_slot(loader.checkpoint(), owner, b.state.kv_quant(), shape);
    if (b.kv_dtype != DType::F8_E4M3) return;
    int64_t missing = 0;
    // ModelOpt writes self_attn.{k_proj.k_scale, v_proj.v_scale}, newer exporters self_attn.{k,v}_scale.
    shape.k_scale = read_kv_cache_scale(loader.checkpoint(), {owner + ".k_proj.k_scale", owner + ".k_scale"}, missing);
    shape.v_scale = read_kv_cache_scale(loader.checkpoint(), {owner + ".v_proj.v_scale", owner + ".v_scale"}, missing);
    b.state.note_missing_kv_scales(missing);
  };
  if (layout.reads_kv_of >= 0 && b.state.find_kv_slot_of_layer(layout.reads_kv_of) < 0 &&
      b.state.expects_kv_from_earlier_stage(layout.reads_kv_of)) {
    read_scales(fmt::format("model.layers.{}.{}", layout.reads_kv_of, layout.module));
    b.state.add_kv(layout.reads_kv_of, shape);  // filled by the stage before, step by step
  }
  if (layout.reads_kv_of >= 0) {
    kv_slot_ = b.state.kv_slot_of_layer(layout.reads_kv_of);
    if (b.state.kv_slots()[kv_slot_].kv_heads != num_kv_heads_ || b.state.kv_slots()[kv_slot_].head_dim != head_dim_)
      fail("layer {}: reads the K/V of layer {}, of another shape", layer, layout.reads_kv_of);
    stores_kv_ = false;
    return;
  }
  read_scales(p);
  kv_slot_ = b.state.add_kv(layer, shape);
}

void Attention::forward(const float* x, std::span<const SequenceSpan> spans, float* y) const {
  std::vector<AttentionSpan> a;
  a.reserve(spans.size());
  for (const SequenceSpan& s : spans)
    a.push_back({&s.state->kv(), s.row0, s.n, s.pos0, s.chunk_end, s.rope_pos, s.rope_delta,
                 image_blocks_ ? s.bidir_end : nullptr});
  forward(x, std::span<const AttentionSpan>(a), y);
}

void Attention::forward(const float* x, std::span<const AttentionSpan> spans, float* y) const {
  forward(x, spans, y, AttentionCore{});
}

void Attention::forward(const float* x, std::span<const AttentionSpan> spans, float* y,
                        const AttentionCore& core) const {
  const int64_t qd = num_heads_ * head_dim_, kvd = num_kv_heads_ * head_dim_;
  const int64_t qw = gated_ ? 2 * qd : qd, width = qw + (q_only_ ? 0 : k_eq_v_ ? 1 : 2) * kvd;
  int64_t m = 0;
  for (const AttentionSpan& s : spans) {
    if (s.row0 != m) fail("attention: batch spans must cover the rows in order");
    if (s.pos0 + s.n > s.cache->capacity())
      fail("sequence of {} tokens exceeds the KV cache capacity ({} positions, max_model_len)", s.pos0 + s.n,
           s.cache->capacity());
    m += s.n;
  }
  std::vector<float> qkv(static_cast<size_t>(m * width)), q(static_cast<size_t>(m * qd));
  std::vector<float> gate(gated_ ? static_cast<size_t>(m * qd) : 0);
  qkv_->forward(x, m, qkv.data());
  const int64_t half = rope_.head_dim() / 2;
  std::vector<float> cos(static_cast<size_t>(half)), sin(cos.size()), qrow(static_cast<size_t>(qd));
  std::vector<float> vrow(k_eq_v_ ? static_cast<size_t>(kvd) : 0);
  for (const AttentionSpan& s : spans) {
    // LongRoPE: by the length the sequence reaches at the end of this forward call's chunk.
    const bool long_rope = rope_.long_factors(s.chunk_end > 0 ? s.chunk_end : s.pos0 + s.n);
    for (int64_t j = 0; j < s.n; ++j) {
      const int64_t i = s.row0 + j, pos = s.pos0 + j;
      float* row = qkv.data() + i * width;
      float *qi = row, *ki = q_only_ ? nullptr : row + qw, *vi = q_only_ ? nullptr : row + qw + kvd;
      if (gated_) {  // per head: query rows, then gate rows
        for (int64_t h = 0; h < num_heads_; ++h) {
          std::copy_n(row + 2 * h * head_dim_, head_dim_, qrow.data() + h * head_dim_);
          std::copy_n(row + (2 * h + 1) * head_dim_, head_dim_, gate.data() + i * qd + h * head_dim_);
        }
        qi = qrow.data();
      }
      if (k_eq_v_) {  // the values: the key projection before k_norm and RoPE
        std::copy_n(ki, kvd, vrow.data());
        vi = vrow.data();
      }
      if (v_norm_) v_rms_.forward(vi, num_kv_heads_, vi, act_);
      if (qk_norm_) {
        q_norm_.forward(qi, num_heads_ * head_dim_ / q_norm_.dim(), qi, act_);
        if (!q_only_) k_norm_.forward(ki, num_kv_heads_ * head_dim_ / k_norm_.dim(), ki, act_);
      }
      if (rope_enabled_) {
        if (s.rope_pos) rope_.cos_sin_3d(s.rope_pos + 3 * j, cos.data(), sin.data());
        else rope_.cos_sin(pos + s.rope_delta, cos.data(), sin.data(), long_rope);
        rope_.rotate(qi, num_heads_, cos.data(), sin.data(), head_dim_);
        if (!q_only_) rope_.rotate(ki, num_kv_heads_, cos.data(), sin.data(), head_dim_);
      }
      round_to_dtype(qi, static_cast<size_t>(qd), act_);
      if (!q_only_) round_to_dtype(ki, static_cast<size_t>(kvd), act_);
      if (stores_kv_) s.cache->store(kv_slot_, pos, ki, vi);
      std::copy(qi, qi + qd, q.data() + i * qd);
      if (q_mult_ != 1.0f)
        for (int64_t k = 0; k < qd; ++k) q[static_cast<size_t>(i * qd + k)] *= q_mult_;
    }
  }
  std::vector<float> attn(static_cast<size_t>(m * qd));
  if (core)
    core(spans, kv_slot_, q.data(), attn.data());
  else
    causal_attention(spans, kv_slot_, q.data(), num_heads_, attn.data(), ThreadPool::global(), nullptr,
                     sinks_.empty() ? nullptr : sinks_.data());
  round_to_dtype(attn.data(), attn.size(), act_);
  if (gated_) {
    for (size_t k = 0; k < attn.size(); ++k) attn[k] *= 1.0f / (1.0f + std::exp(-gate[k]));
    round_to_dtype(attn.data(), attn.size(), act_);
  }
  o_->forward(attn.data(), m, y);
}

}  // namespace fp4lm::model
