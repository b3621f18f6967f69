#include "model/layers/llama4_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/attention.h"
#include "model/layers/activation.h"
#include "model/layers/attention.h"
#include "model/state/kv_cache.h"
#include "model/state/kv_cache_scale.h"
#include "model/load/model_loader.h"
#include "model/state/sequence_state.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

float llama4_query_temperature(int64_t pos, double floor_scale, double attn_scale) {
  // transformers computes it in float32 from float32 positions.
  const float p = static_cast<float>(pos);
  return std::log1p(std::floor((p + 1.0f) / static_cast<float>(floor_scale))) * static_cast<float>(attn_scale) + 1.0f;
}

void rotate_interleaved(float* x, int64_t n_heads, int64_t head_dim, const float* cos, const float* sin) {
  for (int64_t h = 0; h < n_heads; ++h) {
    float* v = x + h * head_dim;
    for (int64_t i = 0; i < head_dim / 2; ++i) {
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = a * cos[i] - b * sin[i];
      v[2 * i + 1] = a * sin[i] + b * cos[i];
    }
  }
}

Llama4Attention::Llama4Attention(const LayerBuild& b, int64_t layer, const Llama4AttentionLayout& layout)
    : layout_(layout), rope_(b.rope) {
  ModelLoader& loader = b.loader;
  const ModelConfig& c = loader.config();
  num_heads_ = c.num_heads;
  num_kv_heads_ = c.num_kv_heads;
  head_dim_ = c.head_dim;
  act_ = loader.dtype();
  if (layout.rope && rope_.head_dim() != head_dim_)
    fail("layer {}: Llama 4 rotates whole heads ({} dims), the RoPE covers {}", layer, head_dim_, rope_.head_dim());
  const std::string p = fmt::format("model.layers.{}.self_attn", layer);
  qkv_ = loader.load_linear(p + ".qkv_proj");
  o_ = loader.load_linear(p + ".o_proj");
  if (layout.l2_qk_norm) l2_ = RmsNorm(std::vector<float>(static_cast<size_t>(head_dim_), 1.0f), c.rms_norm_eps);
  KvSlotShape shape{num_kv_heads_, head_dim_, layout.chunk};
  if (b.state.kv_quant() != KvQuant::none) {
    read_quantized_kv_slot(loader.checkpoint(), p, b.state.kv_quant(), shape);
  } else if (b.kv_dtype == DType::F8_E4M3) {
    int64_t missing = 0;
    shape.k_scale = read_kv_cache_scale(loader.checkpoint(), {p + ".k_proj.k_scale", p + ".k_scale"}, missing);
    shape.v_scale = read_kv_cache_scale(loader.checkpoint(), {p + ".v_proj.v_scale", p + ".v_scale"}, missing);
    b.state.note_missing_kv_scales(missing);
  }
  kv_slot_ = b.state.add_kv(layer, shape);
}

namespace {

// Chunked attention over the batch: each row attends to the positions of its own chunk up to its
// own, read in place from the slot's ring; rows of one sequence and one chunk go in one kernel call.
void chunked_attention(std::span<const SequenceSpan> spans, int64_t slot, int64_t chunk, const float* q,
                       int64_t num_heads, float* out) {
  const kernels::AttentionKernel& kern = kernels::attention_kernel();
  struct Run {
    const KvCache* cache;
    int64_t row, n, pos;  // rows [row, row + n) at positions pos .. pos + n - 1, one chunk
  };
  std::vector<Run> runs;
  for (const SequenceSpan& s : spans)
    for (int64_t j = 0; j < s.n;) {
      const int64_t pos = s.pos0 + j, end = std::min(s.pos0 + s.n, (pos / chunk + 1) * chunk);
      runs.push_back({&s.state->kv(), s.row0 + j, end - pos, pos});
      j += end - pos;
    }
  if (runs.empty()) return;
  const KvCache& first = *runs[0].cache;
  const int64_t hd = first.head_dim(slot), kvh = first.num_kv_heads(slot), group = num_heads / kvh, qd = num_heads * hd;
  const int64_t tasks = static_cast<int64_t>(runs.size()) * kvh;
  ThreadPool::global().parallel_for(tasks, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      const Run& r = runs[static_cast<size_t>(t / kvh)];
      const int64_t g = t % kvh, lo = r.pos / chunk * chunk;
      const KvCache& cache = *r.cache;
      kernels::AttentionCall c;
      c.q = q + r.row * qd + g * group * hd;
      c.q_stride = qd;
      c.out = out + r.row * qd + g * group * hd;
      c.out_stride = qd;
      c.rows = r.n;
      c.pos0 = r.pos - lo;
      c.group = group;
      c.head_dim = hd;
      c.kv_dtype = cache.dtype();
      c.keys = cache.keys(slot, g);
      c.values = cache.values(slot, g);
      c.k_scale = cache.k_scale(slot);
      c.v_scale = cache.v_scale(slot);
      c.ring_first = cache.row_of(slot, lo);
      c.ring_rows = cache.rows(slot);
      if (cache.quant(slot) != KvQuant::none) {
        // A quantized cache: the ring dequantized to float32 (model/layers/attention.cpp does the same).
        thread_local std::vector<float> kd, vd;
        const int64_t n = cache.rows(slot);
        kd.resize(static_cast<size_t>(n * hd));
        vd.resize(kd.size());
        cache.dequantize(slot, 0, g, 0, n, kd.data());
        cache.dequantize(slot, 1, g, 0, n, vd.data());
        c.kv_dtype = DType::F32;
        c.keys = reinterpret_cast<const uint8_t*>(kd.data());
        c.values = reinterpret_cast<const uint8_t*>(vd.data());
        c.k_scale = c.v_scale = 1.0f;
      }
      kernels::run_attention(kern, c);
    }
  });
}

}  // namespace

void Llama4Attention::forward(const float* x, std::span<const SequenceSpan> spans, float* y) const {
  const int64_t qd = num_heads_ * head_dim_, kvd = num_kv_heads_ * head_dim_, width = qd + 2 * kvd;
  int64_t m = 0;
  for (const SequenceSpan& s : spans) {
    if (s.row0 != m) fail("attention: batch spans must cover the rows in order");
    if (s.pos0 + s.n > s.state->kv().capacity())
      fail("sequence of {} tokens exceeds the KV cache capacity ({} positions, max_model_len)", s.pos0 + s.n,
           s.state->kv().capacity());
    m += s.n;
  }
  std::vector<float> qkv(static_cast<size_t>(m * width)), q(static_cast<size_t>(m * qd));
  qkv_->forward(x, m, qkv.data());
  std::vector<float> cos(static_cast<size_t>(head_dim_ / 2)), sin(cos.size());
  for (const SequenceSpan& s : spans)
    for (int64_t j = 0; j < s.n; ++j) {
      const int64_t i = s.row0 + j, pos = s.pos0 + j;
      float* qi = qkv.data() + i * width;
      float *ki = qi + qd, *vi = qi + qd + kvd;
      if (layout_.rope) {
        rope_.cos_sin(pos, cos.data(), sin.data());
        rotate_interleaved(qi, num_heads_, head_dim_, cos.data(), sin.data());
        rotate_interleaved(ki, num_kv_heads_, head_dim_, cos.data(), sin.data());
        round_to_dtype(qi, static_cast<size_t>(qd + kvd), act_);
      }
      if (layout_.l2_qk_norm) {
        l2_.forward(qi, num_heads_, qi, act_);
        l2_.forward(ki, num_kv_heads_, ki, act_);
      }
      if (layout_.temperature) {
        const float t = llama4_query_temperature(pos, layout_.floor_scale, layout_.attn_scale);
        for (int64_t k = 0; k < qd; ++k) qi[k] *= t;
        round_to_dtype(qi, static_cast<size_t>(qd), act_);
      }
      s.state->kv().store(kv_slot_, pos, ki, vi);
      std::copy(qi, qi + qd, q.data() + i * qd);
    }
  std::vector<float> attn(static_cast<size_t>(m * qd));
  if (layout_.chunk > 0) {
    chunked_attention(spans, kv_slot_, layout_.chunk, q.data(), num_heads_, attn.data());
  } else {
    std::vector<AttentionSpan> a;
    a.reserve(spans.size());
    for (const SequenceSpan& s : spans) a.push_back({&s.state->kv(), s.row0, s.n, s.pos0, s.chunk_end});
    causal_attention(std::span<const AttentionSpan>(a), kv_slot_, q.data(), num_heads_, attn.data());
  }
  round_to_dtype(attn.data(), attn.size(), act_);
  o_->forward(attn.data(), m, y);
}

}  // namespace fp4lm::model
