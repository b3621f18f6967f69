#pragma once
// The text of one generated sequence, built token by token: incremental detokenization that
// never splits a UTF-8 character (tokenizer::StreamDecoder), and stop strings. Text that could be
// the start of a stop string is held back until the next tokens decide, so a streaming client
// never sees any part of a stop string; when one appears the text is cut just before it.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace fp4lm::engine {

class TextStream {
 public:
  // `tok` may be null (a checkpoint without tokenizer): the text stays empty.
  TextStream(const tokenizer::Tokenizer* tok, std::vector<std::string> stop, bool skip_special_tokens);

  // Appends one token. Returns true when a stop string is now complete; the text ends before it.
  bool push(int32_t id);
  // The sequence ended for another reason: releases everything held back (a stop string found
  // in the flushed tail still cuts the text, and push's contract holds: true when it did).
  bool finish();
  // The text that became final since the last call.
  std::string take();

  const std::optional<std::string>& stop_reason() const { return stop_reason_; }
  const std::string& text() const { return text_; }  // everything so far, held-back part included

 private:
  bool append(const std::string& s);  // adds decoded text, applies the stop strings
  size_t held_back() const;           // bytes at the end that may begin a stop string

  std::optional<tokenizer::StreamDecoder> decoder_;
  std::vector<std::string> stop_;
  std::string text_;
  size_t ready_ = 0;    // text_[0, ready_) may be emitted
  size_t emitted_ = 0;  // text_[0, emitted_) was taken
  bool stopped_ = false;
  std::optional<std::string> stop_reason_;
};

}  // namespace fp4lm::engine
