#pragma once
// A literal string pattern, or a compiled PCRE2 pattern in UTF + UCP mode (so \p{L}, \s, \w follow Unicode, like the
// Oniguruma patterns in tokenizer.json), JIT-compiled when the library supports it.
// Immutable after construction and safe to share between threads.
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp4lm::tokenizer {

class Regex {
 public:
  // `literal`: the pattern is a plain string, not a regex. `where` names the source of the pattern
  // for error messages (e.g. "tokenizer.json: pre_tokenizer.pretokenizers[0].pattern").
  Regex(std::string_view pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Byte ranges [begin, end) of the non-overlapping matches in `subject`, left to right.
  // `subject` must be valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view subject) const;

  bool jit() const { return jit_; }
  // The pattern's length in bytes when it is a literal string; 0 for a regex.
  size_t literal_size() const { return code_ ? 0 : literal_.size(); }

 private:
  struct Code;
  std::unique_ptr<Code> code_;  // null for a literal pattern
  std::string literal_;
  bool jit_ = false;
  std::string where_;
};

}  // namespace fp4lm::tokenizer
