// q/k row order between llama.cpp and Hugging Face (engine/convert/llama_qk_rows.h).
#include "engine/convert/llama_qk_rows.h"

#include <cstring>

#include "core/error.h"

namespace fp4lm::engine {
namespace {

// Calls f(hf_row, gguf_row) for every row.
template <class F>
void for_each_row_pair(int64_t rows, int64_t n_head, F&& f) {
  if (n_head <= 0 || rows % (2 * n_head) != 0)
    fail("q/k row permutation: {} rows is not a multiple of 2 x {} heads", rows, n_head);
  const int64_t hd = rows / n_head, half = hd / 2;
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t j = 0; j < 2; ++j)
      for (int64_t i = 0; i < half; ++i) f(h * hd + j * half + i, h * hd + 2 * i + j);
}

}  // namespace

void llama_unpermute_rows(const float* gguf, float* hf, int64_t rows, int64_t cols, int64_t n_head) {
  const size_t bytes = static_cast<size_t>(cols) * sizeof(float);
  for_each_row_pair(rows, n_head, [&](int64_t r_hf, int64_t r_gguf) {
    std::memcpy(hf + r_hf * cols, gguf + r_gguf * cols, bytes);
  });
}

void llama_permute_rows(const float* hf, float* gguf, int64_t rows, int64_t cols, int64_t n_head) {
  const size_t bytes = static_cast<size_t>(cols) * sizeof(float);
  for_each_row_pair(rows, n_head, [&](int64_t r_hf, int64_t r_gguf) {
    std::memcpy(gguf + r_gguf * cols, hf + r_hf * cols, bytes);
  });
}

}  // namespace fp4lm::engine
