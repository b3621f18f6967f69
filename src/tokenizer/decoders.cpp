#include "tokenizer/decoders.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fp4lm::tokenizer {

namespace {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  std::string out;
  size_t prev = 0;
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, prev)) {
    out.append(s, prev, pos - prev);
    out.append(to);
    prev = pos + from.size();
  }
  if (prev == 0) return;
  out.append(s, prev, std::string::npos);
  s = std::move(out);
}

// "<0xAB>" -> 0xAB, or -1.
int parse_byte_token(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

}  // namespace

void ByteLevelDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string bytes;
  std::string tok_bytes;
  for (const auto& t : tokens) {
    tok_bytes.clear();
    bool mapped = true;
    for (size_t i = 0; i < t.size() && mapped;) {
      int b = byte_level::char_to_byte(utf8::next(t, i));
      if (b < 0)
        mapped = false;
      else
        tok_bytes.push_back(static_cast<char>(b));
    }
    bytes.append(mapped ? tok_bytes : t);
  }
  tokens.assign(1, utf8::to_valid_lossy(bytes));
}

void MetaspaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (size_t i = 0; i < tokens.size(); ++i) {
    replace_all(tokens[i], replacement_, " ");
    if (i == 0 && strip_first_ && !tokens[i].empty() && tokens[i][0] == ' ') tokens[i].erase(0, 1);
  }
}

void ReplaceDecoder::decode_chain(std::vector<std::string>& tokens) const {
  for (auto& t : tokens) {
    auto matches = pattern_->find_all(t);
    if (matches.empty()) continue;
    std::string out;
    size_t prev = 0;
    for (auto [b, e] : matches) {
      out.append(t, prev, b - prev);
      out.append(content_);
      prev = e;
    }
    out.append(t, prev, std::string::npos);
    t = std::move(out);
  }
}

void ByteFallbackDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::vector<std::string> out;
  out.reserve(tokens.size());
  std::string run;
  size_t run_tokens = 0;
  auto flush = [&] {
    if (run_tokens == 0) return;
    if (utf8::is_valid(run)) {
      out.push_back(run);
    } else {
      for (size_t k = 0; k < run_tokens; ++k) out.emplace_back("\xEF\xBF\xBD");
    }
    run.clear();
    run_tokens = 0;
  };
  for (auto& t : tokens) {
    int b = parse_byte_token(t);
    if (b >= 0) {
      run.push_back(static_cast<char>(b));
      ++run_tokens;
    } else {
      flush();
      out.push_back(std::move(t));
    }
  }
  flush();
  tokens = std::move(out);
}

void FuseDecoder::decode_chain(std::vector<std::string>& tokens) const {
  std::string all;
  for (const auto& t : tokens) all.append(t);
  tokens.assign(1, std::move(all));
}

void StripDecoder::decode_chain(std::vector<std::string>& tokens) const {
  if (content_.empty()) return;
  for (auto& t : tokens) {
    size_t b = 0, e = t.size();
    for (size_t k = 0; k < start_ && e - b >= content_.size() && t.compare(b, content_.size(), content_) == 0; ++k)
      b += content_.size();
    for (size_t k = 0; k < stop_ && e - b >= content_.size() &&
                       t.compare(e - content_.size(), content_.size(), content_) == 0;
         ++k)
      e -= content_.size();
    t = t.substr(b, e - b);
  }
}

}  // namespace fp4lm::tokenizer
