#pragma once
// Normalizers: rewrite the text (outside added tokens) before pre-tokenization.
// Supported tokenizer.json types: NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip,
// Sequence.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/regex.h"

namespace fp4lm::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // `s` is valid UTF-8 and stays so.
  virtual void normalize(std::string& s) const = 0;
  // The largest factor by which normalize() can divide a text's length in bytes, or 0 when it
  // can remove text without bound. Lets a caller reject an over-long prompt from its size alone.
  virtual double max_shrink() const = 0;
};

class UnicodeNormalizer : public Normalizer {
 public:
  enum class Form { NFC, NFD, NFKC, NFKD };
  explicit UnicodeNormalizer(Form form) : form_(form) {}
  void normalize(std::string& s) const override;
  // Canonical singletons shrink 3x (KELVIN SIGN, 3 bytes -> "K"), Hangul composition 3x (three
  // 3-byte jamo -> one syllable), compatibility mappings 4x (U+1D400 MATHEMATICAL BOLD A -> "A").
  double max_shrink() const override { return 4.0; }

 private:
  Form form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& s) const override;
  double max_shrink() const override { return 4.0; }  // KELVIN SIGN -> "k" is 3x; 4 bytes is a code point's most
};

// Replaces every match of a literal string or regex with `content`.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& s) const override;
  // A literal pattern replaced by non-empty content shrinks by at most their length ratio; a
  // regex may match text of any length.
  double max_shrink() const override {
    const size_t n = pattern_->literal_size();
    if (n == 0 || content_.empty()) return 0.0;
    return std::max(1.0, static_cast<double>(n) / static_cast<double>(content_.size()));
  }

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

// Prepends a string to non-empty text (sentencepiece's "▁" prefix).
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& s) const override;
  double max_shrink() const override { return 1.0; }

 private:
  std::string prefix_;
};

// Removes leading and/or trailing whitespace.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override;
  double max_shrink() const override { return (left_ || right_) ? 0.0 : 1.0; }  // all-space text vanishes

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void normalize(std::string& s) const override {
    for (const auto& p : parts_) p->normalize(s);
  }
  double max_shrink() const override {
    double f = 1.0;
    for (const auto& p : parts_) f *= p->max_shrink();
    return f;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace fp4lm::tokenizer
