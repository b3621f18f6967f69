#include "engine/structured/token_vocabulary.h"

#include <algorithm>
#include <cctype>

#include "engine/structured/grammar_error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fp4lm::engine::structured {

std::string token_output_bytes(const tokenizer::Tokenizer& tok, int32_t id) {
  if (tok.is_special(id)) return {};
  const auto piece = tok.id_to_token(id);
  if (!piece) return {};
  const std::string& t = *piece;
  if (t.size() == 6 && t.starts_with("<0x") && t.back() == '>') {
    const int hi = std::isxdigit(static_cast<unsigned char>(t[3])), lo = std::isxdigit(static_cast<unsigned char>(t[4]));
    if (hi && lo) return std::string(1, static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
  }
  const std::string decoded = tok.decode({id}, false);
  // Byte-level tokens: every character maps to a byte, and decoding gives those bytes (made
  // valid UTF-8: compare after the same repair).
  std::string raw;
  bool mapped = true;
  for (size_t i = 0; i < t.size() && mapped;) {
    const int b = tokenizer::byte_level::char_to_byte(tokenizer::utf8::next(t, i));
    if (b < 0) mapped = false;
    else raw.push_back(static_cast<char>(b));
  }
  if (mapped && tokenizer::utf8::to_valid_lossy(raw) == decoded) return raw;
  if (t.starts_with("\xE2\x96\x81") && !decoded.starts_with(" ")) return " " + decoded;  // ▁: a stripped first space
  return decoded;
}

TokenVocabulary::TokenVocabulary(const tokenizer::Tokenizer& tok, int64_t vocab_size) : vocab_(vocab_size) {
  bytes_.resize(static_cast<size_t>(vocab_size));
  const int64_t n = std::min<int64_t>(vocab_size, static_cast<int64_t>(tok.vocab_size()));
  for (int64_t id = 0; id < n; ++id) bytes_[static_cast<size_t>(id)] = token_output_bytes(tok, static_cast<int32_t>(id));
  build();
}

TokenVocabulary::TokenVocabulary(const std::vector<std::string>& token_bytes, int64_t vocab_size)
    : vocab_(vocab_size), bytes_(token_bytes) {
  bytes_.resize(static_cast<size_t>(vocab_size));
  build();
}

void TokenVocabulary::build() {
  std::vector<int32_t> order;
  for (size_t i = 0; i < bytes_.size(); ++i)
    if (!bytes_[i].empty()) order.push_back(static_cast<int32_t>(i));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return bytes_[static_cast<size_t>(a)] < bytes_[static_cast<size_t>(b)];
  });
  byte_ = {0};
  depth_ = {0};
  end_ = {0};
  std::vector<std::vector<int32_t>> toks(1);
  std::vector<int32_t> path = {0};  // node ids along the current prefix; path[d] at depth d
  std::string prev;
  for (int32_t id : order) {
    const std::string& s = bytes_[static_cast<size_t>(id)];
    size_t common = 0;
    while (common < s.size() && common < prev.size() && s[common] == prev[common]) ++common;
    // Close the nodes deeper than the common prefix.
    while (path.size() > common + 1) {
      end_[static_cast<size_t>(path.back())] = static_cast<int32_t>(byte_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      path.push_back(static_cast<int32_t>(byte_.size()));
      byte_.push_back(static_cast<uint8_t>(s[d]));
      depth_.push_back(static_cast<uint16_t>(std::min<size_t>(d + 1, 65535)));
      end_.push_back(0);
      toks.emplace_back();
    }
    toks[static_cast<size_t>(path.back())].push_back(id);
    max_depth_ = std::max(max_depth_, s.size());
    prev = s;
  }
  while (!path.empty()) {
    end_[static_cast<size_t>(path.back())] = static_cast<int32_t>(byte_.size());
    path.pop_back();
  }
  if (max_depth_ >= 65535) throw GrammarError("a token longer than 65535 bytes");
  tok_begin_.assign(byte_.size() + 1, 0);
  for (size_t i = 0; i < byte_.size(); ++i) {
    tok_begin_[i + 1] = tok_begin_[i] + static_cast<int32_t>(toks[i].size());
    tok_ids_.insert(tok_ids_.end(), toks[i].begin(), toks[i].end());
  }
}

}  // namespace fp4lm::engine::structured
