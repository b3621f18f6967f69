#pragma once
// Token embedding lookup straight from the (mmapped) checkpoint table: one row is converted to
// float32 per token, so a 151936 x 2048 table is never materialized.
#include <cstdint>

#include "core/tensor.h"

namespace fp4lm::model {

class Embedding {
 public:
  Embedding() = default;
  // `table` [vocab, hidden] in F32, BF16 or F16, kept alive by the caller.
  explicit Embedding(const TensorView& table);

  int64_t vocab() const { return vocab_; }
  int64_t hidden() const { return hidden_; }
  // out[i] = table[ids[i]]; Error for an id outside [0, vocab).
  void lookup(const int32_t* ids, int64_t n, float* out) const;

 private:
  TensorView table_;
  int64_t vocab_ = 0, hidden_ = 0;
};

}  // namespace fp4lm::model
