#pragma once
// Added tokens (special tokens such as <|im_start|>, and user-added words): found in the text
// before pre-tokenization, leftmost-longest first, so they are never split by the model.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace fp4lm::tokenizer {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
  bool lstrip = false;       // swallow whitespace on the left
  bool rstrip = false;       // swallow whitespace on the right
  bool single_word = false;  // only match when not inside a word
  bool normalized = true;    // match in normalized text (else in the raw text)
};

// A piece of text: either an added token (`id` >= 0) or plain text [begin, end) to tokenize.
struct Segment {
  size_t begin = 0, end = 0;
  int32_t id = -1;
};

class AddedVocabulary {
 public:
  // Normalized tokens are matched by their normalized content (`normalizer` may be null).
  AddedVocabulary(std::vector<AddedToken> tokens, const Normalizer* normalizer);
  ~AddedVocabulary();

  // Splits `text` on the raw-matched (normalized == false) or the normalized-matched tokens.
  std::vector<Segment> split(std::string_view text, bool normalized_tokens) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool has_normalized_tokens() const;

 private:
  struct Trie;
  std::vector<AddedToken> tokens_;
  std::unique_ptr<Trie> raw_, normalized_;
};

}  // namespace fp4lm::tokenizer
