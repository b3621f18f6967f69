#pragma once
// Non-finite values (NaN, ±inf) in activations are errors, not silent garbage: the model checks
// the input of every Linear / MoE layer, the residual stream after each decoder layer and the
// logits (one pass over values the layer reads anyway), and CausalLM turns a hit into a
// one-line error naming the place, the position and the sequence.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/error.h"

namespace fp4lm::model {

// Index of the first NaN/inf in x[0, n), or -1 when all are finite.
int64_t first_non_finite(const float* x, size_t n);

// A non-finite value met at row `row` of a call (`where` names the tensor, e.g. "the input of
// model.layers.3.mlp.down_proj"). CausalLM::forward rethrows it with batch_index and position
// filled in, so a server can fail just that sequence.
class NonFiniteError : public Error {
 public:
  NonFiniteError(std::string where, int64_t row, float value, int64_t batch_index = -1, int64_t position = -1,
                 int64_t sequence_id = -1);
  const std::string& where() const { return where_; }
  int64_t row() const { return row_; }
  float value() const { return value_; }
  int64_t batch_index() const { return batch_index_; }  // -1 outside a CausalLM forward
  int64_t position() const { return position_; }
  int64_t sequence_id() const { return sequence_id_; }  // the SequenceStore id, -1 if none

 private:
  std::string where_;
  int64_t row_;
  float value_;
  int64_t batch_index_, position_, sequence_id_;
};

// Throws NonFiniteError for the first non-finite value of x [m, width]; `where` is
// what + name (built only on a hit).
void check_finite(const float* x, int64_t m, int64_t width, std::string_view what, std::string_view name = {});

}  // namespace fp4lm::model
