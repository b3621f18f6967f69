#include "model/layers/embedding.h"

#include <cstring>
#include <vector>

#include "core/error.h"

namespace fp4lm::model {

Embedding::Embedding(const TensorView& table) : table_(table) {
  if (table.shape.size() != 2) fail("embedding table must be 2-D, found shape {}", shape_str(table.shape));
  if (table.dtype != DType::F32 && table.dtype != DType::BF16 && table.dtype != DType::F16)
    fail("embedding table must be F32, BF16 or F16, found {}", dtype_name(table.dtype));
  vocab_ = table.shape[0];
  hidden_ = table.shape[1];
}

void Embedding::lookup(const int32_t* ids, int64_t n, float* out) const {
  const size_t esize = dtype_size(table_.dtype), row = static_cast<size_t>(hidden_);
  std::vector<uint8_t> aligned(row * esize);  // checkpoint data may be misaligned for its dtype
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_) fail("token id {} is outside the vocabulary [0, {})", id, vocab_);
    std::memcpy(aligned.data(), table_.data + static_cast<size_t>(id) * row * esize, row * esize);
    to_f32_n(aligned.data(), table_.dtype, out + i * hidden_, row);
  }
}

}  // namespace fp4lm::model
