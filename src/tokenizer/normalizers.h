#pragma once
// Normalizers: rewrite the text (outside added tokens) before pre-tokenization.
// Supported tokenizer.json types: NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip,
// Sequence.
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
};

class UnicodeNormalizer : public Normalizer {
 public:
  enum class Form { NFC, NFD, NFKC, NFKD };
  explicit UnicodeNormalizer(Form form) : form_(form) {}
  void normalize(std::string& s) const override;

 private:
  Form form_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  void normalize(std::string& s) const override;
};

// Replaces every match of a literal string or regex with `content`.
class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void normalize(std::string& s) const override;

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

// Prepends a string to non-empty text (sentencepiece's "▁" prefix).
class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  void normalize(std::string& s) const override;

 private:
  std::string prefix_;
};

// Removes leading and/or trailing whitespace.
class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void normalize(std::string& s) const override;

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

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace fp4lm::tokenizer
