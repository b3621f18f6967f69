#include "engine/text_stream.h"

#include <algorithm>

namespace fp4lm::engine {

TextStream::TextStream(const tokenizer::Tokenizer* tok, std::vector<std::string> stop, bool skip_special_tokens)
    : stop_(std::move(stop)) {
  if (tok) decoder_.emplace(*tok, skip_special_tokens);
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
}

bool TextStream::push(int32_t id) {
  if (stopped_ || !decoder_) return stopped_;
  return append(decoder_->push(id));
}

bool TextStream::finish() {
  if (!stopped_ && decoder_) append(decoder_->flush());
  if (!stopped_) ready_ = text_.size();
  return stopped_;
}

std::string TextStream::take() {
  std::string out = text_.substr(emitted_, ready_ - emitted_);
  emitted_ = ready_;
  return out;
}

bool TextStream::append(const std::string& s) {
  if (s.empty()) return false;
  const size_t old = text_.size();
  text_ += s;
  // The earliest stop string that ends inside the new text (it may start in held-back text).
  size_t cut = std::string::npos;
  const std::string* which = nullptr;
  for (const std::string& st : stop_) {
    size_t from = old >= st.size() - 1 ? old - (st.size() - 1) : 0;
    from = std::max(from, emitted_);
    size_t pos = text_.find(st, from);
    if (pos != std::string::npos && pos < cut) {
      cut = pos;
      which = &st;
    }
  }
  if (which) {
    text_.resize(cut);
    ready_ = text_.size();
    stopped_ = true;
    stop_reason_ = *which;
    return true;
  }
  ready_ = text_.size() - held_back();
  return false;
}

size_t TextStream::held_back() const {
  size_t held = 0;
  const size_t avail = text_.size() - emitted_;
  for (const std::string& st : stop_) {
    // The longest proper prefix of st that the text ends with.
    for (size_t k = std::min(st.size() - 1, avail); k > held; --k)
      if (text_.compare(text_.size() - k, k, st, 0, k) == 0) {
        held = k;
        break;
      }
  }
  return held;
}

}  // namespace fp4lm::engine
