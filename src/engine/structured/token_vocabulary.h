#pragma once
// The vocabulary as the grammar sees it: each token's output bytes, in a byte trie stored in
// preorder (node i's subtree is [i, end[i])), so a mask is one linear walk that skips a whole
// subtree as soon as its prefix is rejected. Special tokens (EOS, chat markers) are not in the
// trie: they produce no text; the mask handles end-of-sequence ids separately.
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fp4lm::engine::structured {

class TokenVocabulary {
 public:
  // `vocab_size`: the model's logits row length (ids past the tokenizer's are never allowed).
  TokenVocabulary(const tokenizer::Tokenizer& tok, int64_t vocab_size);
  // From explicit byte strings (tests); an empty string marks an id that is never allowed.
  TokenVocabulary(const std::vector<std::string>& token_bytes, int64_t vocab_size);

  int64_t size() const { return vocab_; }
  const std::string& bytes(int32_t id) const { return bytes_[static_cast<size_t>(id)]; }
  size_t num_nodes() const { return byte_.size(); }
  size_t max_depth() const { return max_depth_; }

  // Preorder trie; node 0 is the root (no byte).
  std::vector<uint8_t> byte_;
  std::vector<uint16_t> depth_;
  std::vector<int32_t> end_;
  std::vector<int32_t> tok_begin_;  // tokens ending at node i: tok_ids_[tok_begin_[i] .. tok_begin_[i+1])
  std::vector<int32_t> tok_ids_;

 private:
  void build();
  int64_t vocab_;
  std::vector<std::string> bytes_;
  size_t max_depth_ = 0;
};

// The bytes a token adds to the output text: byte-level (GPT-2 style) tokens map back to raw bytes
// (possibly part of a UTF-8 character), <0xXX> byte-fallback tokens to their byte, others to their
// decoded text (a leading ▁ to a space). Empty for special and absent ids.
std::string token_output_bytes(const tokenizer::Tokenizer& tok, int32_t id);

}  // namespace fp4lm::engine::structured
