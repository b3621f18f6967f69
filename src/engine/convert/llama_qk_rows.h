#pragma once
// llama.cpp stores a Llama model's q_proj / k_proj rows permuted: its converter
// (convert_hf_to_gguf.py, LlamaModel.permute) reshapes each weight to
// [n_head, 2, head_dim / 2, cols] and swaps the middle axes, so HF's rotate-half layout (row
// j·head_dim/2 + i of a head, j ∈ {0, 1}) becomes GGML's interleaved pairs (row 2i + j), which its
// RoPE rotates. k_proj is permuted with the KV head count. These undo and redo that.
#include <cstdint>

namespace fp4lm::engine {

// gguf [rows, cols] (rows = n_head · head_dim, row-major) -> hf, HF's row order. Error when rows
// is not a multiple of 2 · n_head.
void llama_unpermute_rows(const float* gguf, float* hf, int64_t rows, int64_t cols, int64_t n_head);
// The inverse: HF's order -> llama.cpp's (what its converter writes).
void llama_permute_rows(const float* hf, float* gguf, int64_t rows, int64_t cols, int64_t n_head);

}  // namespace fp4lm::engine
