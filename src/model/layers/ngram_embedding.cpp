#include "model/layers/ngram_embedding.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

namespace {

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull, kM1 = 0xBF58476D1CE4E5B9ull, kM2 = 0x94D049BB133111EBull;

uint64_t splitmix64(uint64_t v) {
  v += kGamma;
  v = (v ^ (v >> 30)) * kM1;
  v = (v ^ (v >> 27)) * kM2;
  return v ^ (v >> 31);
}

bool is_prime(int64_t v) {
  if (v < 2) return false;
  if (v % 2 == 0) return v == 2;
  for (int64_t d = 3; d * d <= v; d += 2)
    if (v % d == 0) return false;
  return true;
}

}  // namespace

std::vector<int64_t> NGramEmbedding::multipliers(int64_t vocab, int64_t ngram, int64_t ple_index, uint64_t seed) {
  const int64_t max_long = INT64_MAX;
  const int64_t mult_max = max_long / std::max<int64_t>(vocab, 1);
  const uint64_t half = static_cast<uint64_t>(std::max<int64_t>(1, mult_max / 2));
  const uint64_t base = seed + 10007ull * static_cast<uint64_t>(ple_index);
  std::vector<int64_t> out;
  for (int64_t i = 0; i < ngram; ++i)
    out.push_back(static_cast<int64_t>(2 * (splitmix64(base + kGamma * static_cast<uint64_t>(i + 1)) % half) + 1));
  return out;
}

int64_t NGramEmbedding::nth_prime_after(int64_t start, int64_t count) {
  int64_t p = start;
  for (int64_t i = 0; i < count; ++i) {
    ++p;
    while (!is_prime(p)) ++p;
  }
  return p;
}

NGramEmbedding::NGramEmbedding(const ModelLoader& l, const std::string& prefix, int64_t ple_index, int64_t embed_dim)
    : prefix_(prefix) {
  const ModelConfig& c = l.config();
  const Qwen4ExpConfig& q = c.qwen4_exp;
  ngram_ = q.ngram_size;
  heads_per_ = q.heads_per_ngram;
  heads_ = (ngram_ - 1) * heads_per_;
  head_dim_ = embed_dim / heads_;
  eos_ = q.eos_token_id;
  vocab_ = c.vocab_size;
  mult_ = multipliers(vocab_, ngram_, ple_index, q.seed);
  int64_t total = 0, p = q.ngram_vocab_size_base - 1;
  for (int64_t h = 0; h < heads_; ++h) {
    // The (global + 1)-th prime after base - 1, found incrementally (primes ascend with the head).
    const int64_t global = ple_index * heads_ + h;
    if (h == 0) p = nth_prime_after(q.ngram_vocab_size_base - 1, global + 1);
    else p = nth_prime_after(p, 1);
    sizes_.push_back(p);
    offsets_.push_back(total);
    total += p;
  }
  const int64_t padded = (total + q.ngram_vocab_divisor - 1) / q.ngram_vocab_divisor * q.ngram_vocab_divisor;
  // transformers' buffers, when saved: they must be what the config derives.
  const io::Checkpoint& ck = l.checkpoint();
  auto check = [&](const char* what, const std::vector<int64_t>& want) {
    const std::string name = prefix + "." + what;
    const TensorView* t = ck.find(name);
    if (!t) return;
    std::vector<int64_t> got;
    if (t->dtype == DType::I64) got.assign(t->as<int64_t>(), t->as<int64_t>() + t->numel());
    if (got != want)
      fail("{}: tensor '{}' does not hold the values the config derives (ngram_size, heads_per_ngram, "
           "ngram_vocab_size_base, seed, vocab_size); expected int64 [{}]",
           ck.dir(), name, want.size());
    ck.mark_used(name);
  };
  check("layer_multipliers", mult_);
  check("ngram_heads_vocab_sizes", sizes_);
  check("ngram_heads_offsets", offsets_);
  // The table: one tensor, or split_ngram_parts shards concatenated by rows.
  auto find = [&](const std::string& name) -> const TensorView* {
    const TensorView* t = ck.find(name);
    if (t) ck.mark_used(name);
    return t;
  };
  if (const TensorView* t = find(prefix + ".ngram_embedding.weight")) {
    shards_.push_back(t);
  } else {
    for (int64_t k = 0; k < q.split_ngram_parts; ++k) {
      const std::string name = fmt::format("{}.ngram_embedding.shard_{}.weight", prefix, k);
      const TensorView* s = find(name);
      if (!s)
        fail("{}: tensor '{}' not found (neither {}.ngram_embedding.weight nor its {} shards, split_ngram_parts)",
             ck.dir(), name, prefix, q.split_ngram_parts);
      shards_.push_back(s);
    }
  }
  int64_t rows = 0;
  for (const TensorView* s : shards_) {
    if (s->shape.size() != 2 || s->shape[1] != head_dim_ ||
        (s->dtype != DType::BF16 && s->dtype != DType::F16 && s->dtype != DType::F32))
      fail("{}: {}.ngram_embedding: a shard of shape {} {} (expected [rows, {}] (ple_embed_dim / n-gram heads), "
           "bfloat16, float16 or float32)",
           ck.dir(), prefix, shape_str(s->shape), dtype_name(s->dtype), head_dim_);
    rows += s->shape[0];
    shard_rows_.push_back(rows);
  }
  if (rows != padded)
    fail("{}: {}.ngram_embedding holds {} rows; the config's n-gram heads need {} (their primes' sum {} padded to "
         "make_ngram_vocab_size_divisible_by {})",
         ck.dir(), prefix, rows, padded, total, q.ngram_vocab_divisor);
}

void NGramEmbedding::row(int64_t id, float* dst) const {
  size_t s = 0;
  while (shard_rows_[s] <= id) ++s;
  const int64_t r = id - (s == 0 ? 0 : shard_rows_[s - 1]);
  const TensorView& t = *shards_[s];
  to_f32_n(t.data + static_cast<size_t>(r * head_dim_) * dtype_size(t.dtype), t.dtype, dst,
           static_cast<size_t>(head_dim_));
}

void NGramEmbedding::embed(const std::vector<int64_t>& history, int64_t n, float* out) const {
  const int64_t len = static_cast<int64_t>(history.size()), first = len - n;
  for (int64_t i = first; i < len; ++i) {
    // Predecessor s of history[i]: itself unless before the sequence or across an eos strictly
    // between (transformers' _shift_right_ignore_eos over the history it holds).
    int64_t prev_eos = -1;
    std::vector<int64_t> shifted(static_cast<size_t>(ngram_));
    for (int64_t s = 0; s < ngram_; ++s) {
      const int64_t src = i - s;
      if (s > 0 && src + 1 <= i - 1 && history[static_cast<size_t>(src + 1)] == eos_) prev_eos = std::max(prev_eos, src + 1);
      const bool valid = src >= 0 && src > prev_eos;
      shifted[static_cast<size_t>(s)] = valid ? history[static_cast<size_t>(src)] : eos_;
    }
    float* o = out + (i - first) * dim();
    int64_t mixed = shifted[0] * mult_[0];
    for (int64_t g = 2; g <= ngram_; ++g) {
      mixed ^= shifted[static_cast<size_t>(g - 1)] * mult_[static_cast<size_t>(g - 1)];
      for (int64_t h = 0; h < heads_per_; ++h) {
        const int64_t head = (g - 2) * heads_per_ + h;
        const int64_t id = mixed % sizes_[static_cast<size_t>(head)] + offsets_[static_cast<size_t>(head)];
        row(id, o + head * head_dim_);
      }
    }
  }
}

}  // namespace fp4lm::model
