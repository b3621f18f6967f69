#pragma once
// Qwen4-Exp's hashed n-gram embedding (transformers' Qwen4ExpTextNGramEmbedding), the input of a
// PLE layer (model/layers/ple_ngram_layer.h). For every token and every order g in 2 .. ngram_size, the
// ids of the token and its g - 1 predecessors are hashed: id_s · multiplier_s XORed over s (int64,
// the multipliers from a splitmix64 of seed + 10007 · ple_index), then for each of the
// heads_per_ngram heads of that order taken modulo the head's own prime (the (global head + 1)-th
// prime ≥ ngram_vocab_size_base, global head = ple_index · heads + head) plus the head's offset
// into one table [padded vocab, embed_dim / heads]. A predecessor past the start of the sequence
// or before an eos token (within the same segment only) is the eos id. The heads' rows,
// concatenated in order (orders ascending, then heads), are the token's embedding [embed_dim].
// The table is read in place from the checkpoint (stored as split_ngram_parts shards
// ngram_embedding.shard_K.weight, concatenated by rows, or as one ngram_embedding.weight).
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fp4lm::model {

class ModelLoader;

class NGramEmbedding {
 public:
  // `prefix`: "model.layers.0.ple.ple_embedding"; ple_index: the layer's place in ple_layer_ids.
  NGramEmbedding(const ModelLoader& l, const std::string& prefix, int64_t ple_index, int64_t embed_dim);
  // The ids of the g-gram heads for a token: `history` holds context() earlier ids then the
  // token (history[context()]), earlier ones first.
  int64_t context() const { return ngram_ - 1; }
  // out [n, embed_dim] for the last n of the ids in `history` (history.size() >= n + context()).
  void embed(const std::vector<int64_t>& history, int64_t n, float* out) const;
  int64_t dim() const { return heads_ * head_dim_; }

  // transformers' _build_layer_multipliers / _find_nth_prime_after (exposed for the unit test).
  static std::vector<int64_t> multipliers(int64_t vocab, int64_t ngram, int64_t ple_index, uint64_t seed);
  static int64_t nth_prime_after(int64_t start, int64_t count);

 private:
  int64_t ngram_ = 0, heads_per_ = 0, heads_ = 0, head_dim_ = 0, eos_ = 0, vocab_ = 0;
  std::vector<int64_t> mult_, sizes_, offsets_;
  std::vector<const TensorView*> shards_;  // row-concatenated
  std::vector<int64_t> shard_rows_;
  std::string prefix_;
  void row(int64_t id, float* dst) const;
};

}  // namespace fp4lm::model
