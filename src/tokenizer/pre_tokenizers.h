#pragma once
// Pre-tokenizers: split normalized text into the words the model tokenizes independently.
// Supported tokenizer.json types: ByteLevel, Split, Digits, Metaspace, Whitespace,
// WhitespaceSplit, Sequence.
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/regex.h"

namespace fp4lm::tokenizer {

// One piece of text on its way to the model. `at_origin`: the piece begins at offset 0 of the
// encoded text (Metaspace's prepend_scheme "first" only prefixes such a piece).
struct Piece {
  std::string text;
  bool at_origin = false;
};

// What happens to the matched parts when splitting (tokenizers' SplitDelimiterBehavior).
enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

// Splits `piece` at the byte ranges `matches` (sorted, non-overlapping) per `behavior`
// (`invert`: the ranges are the parts to keep). Empty pieces are dropped.
void split_piece(const Piece& piece, const std::vector<std::pair<size_t, size_t>>& matches,
                 SplitBehavior behavior, bool invert, std::vector<Piece>& out);

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by its sub-pieces.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
  // The largest factor by which pre_tokenize() can divide the total length in bytes of the
  // pieces, or 0 when it can drop text without bound (see Normalizer::max_shrink).
  virtual double max_shrink() const = 0;
};

// Maps every byte to GPT-2's printable alphabet, optionally after splitting with GPT-2's regex
// and prefixing a space.
class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex);
  void pre_tokenize(std::vector<Piece>& pieces) const override;
  double max_shrink() const override { return 1.0; }  // every byte becomes a 1- or 2-byte character

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> regex_;  // null when use_regex is false
};

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> pattern, SplitBehavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override;
  double max_shrink() const override { return behavior_ == SplitBehavior::Removed ? 0.0 : 1.0; }

 private:
  std::unique_ptr<Regex> pattern_;
  SplitBehavior behavior_;
  bool invert_;
};

// Separates numeric characters from the rest: each digit alone, or runs of digits.
class DigitsPreTokenizer : public PreTokenizer {
 public:
  explicit DigitsPreTokenizer(bool individual_digits) : individual_(individual_digits) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override;
  double max_shrink() const override { return 1.0; }

 private:
  bool individual_;
};

// Sentencepiece-style: spaces become `replacement` ("▁"), a prefix is added per the scheme,
// and (when `split`) each "▁" starts a new piece.
class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { Always, Never, First };
  MetaspacePreTokenizer(std::string replacement, Prepend scheme, bool split)
      : replacement_(std::move(replacement)), scheme_(scheme), split_(split) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override;
  // A space becomes the replacement: an empty replacement drops every space.
  double max_shrink() const override { return replacement_.empty() ? 0.0 : 1.0; }

 private:
  std::string replacement_;
  Prepend scheme_;
  bool split_;
};

// Whitespace: pieces are \w+ runs and runs of other non-space characters; WhitespaceSplit:
// split on whitespace only.
class WhitespacePreTokenizer : public PreTokenizer {
 public:
  explicit WhitespacePreTokenizer(bool split_punctuation);
  void pre_tokenize(std::vector<Piece>& pieces) const override;
  double max_shrink() const override { return 0.0; }  // whitespace is dropped

 private:
  std::unique_ptr<Regex> regex_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& p : parts_) p->pre_tokenize(pieces);
  }
  double max_shrink() const override {
    double f = 1.0;
    for (const auto& p : parts_) f *= p->max_shrink();
    return f;
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

}  // namespace fp4lm::tokenizer
