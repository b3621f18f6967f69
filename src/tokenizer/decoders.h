#pragma once
// Decoders: turn token strings back into text. Each one rewrites the list of token strings
// (Hugging Face's decode_chain); the result is their concatenation.
// Supported tokenizer.json types: ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip,
// Sequence.
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/regex.h"

namespace fp4lm::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
};

// Maps GPT-2 byte characters back to bytes; invalid UTF-8 becomes U+FFFD. A token containing a
// character outside the mapping (e.g. an added token with a space) is kept as it is.
class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

// "▁" -> " ", and the first token loses its leading space unless the prepend scheme is "never".
class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first_space)
      : replacement_(std::move(replacement)), strip_first_(strip_first_space) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string replacement_;
  bool strip_first_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::unique_ptr<Regex> pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::unique_ptr<Regex> pattern_;
  std::string content_;
};

// Runs of <0xXX> tokens become the bytes they stand for; a run that is not valid UTF-8 becomes
// one U+FFFD per byte token.
class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

// Joins all tokens into one.
class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override;
};

// Removes up to `start` leading and `stop` trailing occurrences of `content` from each token.
class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override;

 private:
  std::string content_;
  size_t start_, stop_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& p : parts_) p->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

}  // namespace fp4lm::tokenizer
