#include "model/attention.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "model/activation.h"
#include "model/model_loader.h"
#include "model/sequence_state.h"

namespace fp4lm::model {

namespace {

// Eight independent partial sums: vectorizable without reassociating a single chain.
inline float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

constexpr int64_t kBlock = 64;  // cache rows converted to float32 at a time (16-bit caches)

// The 256 E4M3 codes as float32.
const float* e4m3_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

// Rows [t0, t0+n) of one head's K or V plane as float32: a direct pointer for a float32 cache,
// else converted into `scratch` (FP8: code × scale).
const float* rows_f32(const uint8_t* plane, DType dt, int64_t head_dim, int64_t t0, int64_t n,
                      std::vector<float>& scratch, float scale) {
  if (dt == DType::F32) return reinterpret_cast<const float*>(plane) + t0 * head_dim;
  scratch.resize(static_cast<size_t>(n * head_dim));
  if (dt == DType::F8_E4M3) {
    const float* lut = e4m3_table();
    const uint8_t* src = plane + t0 * head_dim;
    for (size_t i = 0; i < scratch.size(); ++i) scratch[i] = lut[src[i]] * scale;
    return scratch.data();
  }
  to_f32_n(plane + static_cast<size_t>(t0 * head_dim) * dtype_size(dt), dt, scratch.data(), scratch.size());
  return scratch.data();
}

}  // namespace

void causal_attention(std::span<const AttentionSpan> spans, int64_t layer, const float* q, int64_t num_heads,
                      float* out, ThreadPool& pool) {
  if (spans.empty()) return;
  const int64_t hd = spans[0].cache->head_dim(), kvh = spans[0].cache->num_kv_heads();
  if (num_heads % kvh != 0) fail("attention: {} heads do not group over {} KV heads", num_heads, kvh);
  // Per row: its cache and position.
  std::vector<const KvCache*> row_cache;
  std::vector<int64_t> row_pos;
  for (const AttentionSpan& s : spans) {
    if (s.pos0 < 0 || s.pos0 + s.n > s.cache->capacity())
      fail("attention: positions [{}, {}) exceed the KV cache capacity {}", s.pos0, s.pos0 + s.n,
           s.cache->capacity());
    if (s.cache->head_dim() != hd || s.cache->num_kv_heads() != kvh)
      fail("attention: caches of different shapes in one batch");
    for (int64_t i = 0; i < s.n; ++i) {
      row_cache.push_back(s.cache);
      row_pos.push_back(s.pos0 + i);
    }
  }
  const int64_t m = static_cast<int64_t>(row_pos.size());
  const int64_t group = num_heads / kvh;
  const float denom = std::sqrt(static_cast<float>(hd));
  pool.parallel_for(m * num_heads, [&](int64_t begin, int64_t end, int) {
    std::vector<float> scores, kbuf, vbuf;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t i = task / num_heads, h = task % num_heads, g = h / group;
      const KvCache& cache = *row_cache[i];
      const DType dt = cache.dtype();
      const int64_t len = row_pos[i] + 1;
      const float* qh = q + (i * num_heads + h) * hd;
      float* oh = out + (i * num_heads + h) * hd;
      scores.resize(static_cast<size_t>(len));
      const uint8_t* kplane = cache.keys(layer, g);
      const uint8_t* vplane = cache.values(layer, g);
      float mx = -INFINITY;
      for (int64_t t0 = 0; t0 < len; t0 += kBlock) {
        const int64_t n = std::min(kBlock, len - t0);
        const float* k = rows_f32(kplane, dt, hd, t0, n, kbuf, cache.k_scale(layer));
        for (int64_t t = 0; t < n; ++t) {
          const float s = dot(qh, k + t * hd, hd) / denom;
          scores[t0 + t] = s;
          mx = std::max(mx, s);
        }
      }
      float sum = 0;
      for (int64_t t = 0; t < len; ++t) {
        scores[t] = std::exp(scores[t] - mx);
        sum += scores[t];
      }
      for (int64_t t = 0; t < len; ++t) scores[t] /= sum;
      std::fill(oh, oh + hd, 0.0f);
      for (int64_t t0 = 0; t0 < len; t0 += kBlock) {
        const int64_t n = std::min(kBlock, len - t0);
        const float* v = rows_f32(vplane, dt, hd, t0, n, vbuf, cache.v_scale(layer));
        for (int64_t t = 0; t < n; ++t) {
          const float p = scores[t0 + t];
          const float* vt = v + t * hd;
          for (int64_t d = 0; d < hd; ++d) oh[d] += p * vt[d];
        }
      }
    }
  });
}

void causal_attention(const KvCache& cache, int64_t layer, const float* q, int64_t m, int64_t pos0,
                      int64_t num_heads, float* out, ThreadPool& pool) {
  // The batched core only reads through the span's cache pointer.
  const AttentionSpan span{const_cast<KvCache*>(&cache), 0, m, pos0};
  causal_attention(std::span<const AttentionSpan>(&span, 1), layer, q, num_heads, out, pool);
}

Attention::Attention(ModelLoader& loader, int64_t layer, const Rope& rope)
    : layer_(layer), rope_(rope) {
  const ModelConfig& c = loader.config();
  num_heads_ = c.num_heads;
  num_kv_heads_ = c.num_kv_heads;
  head_dim_ = c.head_dim;
  act_ = loader.dtype();
  const std::string p = fmt::format("model.layers.{}.self_attn", layer);
  qkv_ = loader.load_linear(p + ".qkv_proj");
  o_ = loader.load_linear(p + ".o_proj");
  qk_norm_ = c.qk_norm;
  if (qk_norm_) {
    q_norm_ = RmsNorm(loader.tensor_f32(p + ".q_norm.weight", {head_dim_}), c.rms_norm_eps);
    k_norm_ = RmsNorm(loader.tensor_f32(p + ".k_norm.weight", {head_dim_}), c.rms_norm_eps);
  }
}

void Attention::forward(const float* x, std::span<const SequenceSpan> spans, float* y) const {
  std::vector<AttentionSpan> a;
  a.reserve(spans.size());
  for (const SequenceSpan& s : spans) a.push_back({&s.state->kv(), s.row0, s.n, s.pos0});
  forward(x, std::span<const AttentionSpan>(a), y);
}

void Attention::forward(const float* x, std::span<const AttentionSpan> spans, float* y) const {
  const int64_t qd = num_heads_ * head_dim_, kvd = num_kv_heads_ * head_dim_, width = qd + 2 * kvd;
  int64_t m = 0;
  for (const AttentionSpan& s : spans) {
    if (s.row0 != m) fail("attention: batch spans must cover the rows in order");
    if (s.pos0 + s.n > s.cache->capacity())
      fail("sequence of {} tokens exceeds the KV cache capacity ({} positions, --max-model-len)", s.pos0 + s.n,
           s.cache->capacity());
    m += s.n;
  }
  std::vector<float> qkv(static_cast<size_t>(m * width)), q(static_cast<size_t>(m * qd));
  qkv_->forward(x, m, qkv.data());
  std::vector<float> cos(static_cast<size_t>(head_dim_ / 2)), sin(cos.size());
  for (const AttentionSpan& s : spans)
    for (int64_t j = 0; j < s.n; ++j) {
      const int64_t i = s.row0 + j, pos = s.pos0 + j;
      float* row = qkv.data() + i * width;
      float *qi = row, *ki = row + qd, *vi = row + qd + kvd;
      if (qk_norm_) {
        q_norm_.forward(qi, num_heads_, qi, act_);
        k_norm_.forward(ki, num_kv_heads_, ki, act_);
      }
      rope_.cos_sin(pos, cos.data(), sin.data());
      rope_.rotate(qi, num_heads_, cos.data(), sin.data());
      rope_.rotate(ki, num_kv_heads_, cos.data(), sin.data());
      round_to_dtype(qi, static_cast<size_t>(qd + kvd), act_);
      s.cache->store(layer_, pos, ki, vi);
      std::copy(qi, qi + qd, q.data() + i * qd);
    }
  std::vector<float> attn(static_cast<size_t>(m * qd));
  causal_attention(spans, layer_, q.data(), num_heads_, attn.data());
  round_to_dtype(attn.data(), attn.size(), act_);
  o_->forward(attn.data(), m, y);
}

}  // namespace fp4lm::model
