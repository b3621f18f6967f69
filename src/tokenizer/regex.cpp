#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace fp4lm::tokenizer {

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof(buf));
  return reinterpret_cast<const char*>(buf);
}

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code) : md(pcre2_match_data_create_from_pattern(code, nullptr)) {
    if (!md) throw std::bad_alloc();
  }
  ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

Regex::Regex(std::string_view pattern, bool literal, const std::string& where)
    : where_(where) {
  if (literal) {  // plain substring search; an empty literal never matches
    literal_ = pattern;
    return;
  }
  code_ = std::make_unique<Code>();
  int err = 0;
  PCRE2_SIZE err_off = 0;
  uint32_t opts = PCRE2_UTF | PCRE2_UCP;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), opts,
                              &err, &err_off, nullptr);
  if (!code_->code)
    fail("{}: cannot compile regex '{}' at offset {}: {}", where, pattern, err_off,
         pcre2_message(err));
  // JIT is an optimisation only: when unavailable (or it fails) the interpreter is used.
  jit_ = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view subject) const {
  std::vector<std::pair<size_t, size_t>> out;
  if (!code_) {
    if (literal_.empty()) return out;
    for (size_t pos = subject.find(literal_); pos != std::string_view::npos;
         pos = subject.find(literal_, pos + literal_.size()))
      out.emplace_back(pos, pos + literal_.size());
    return out;
  }
  MatchData data(code_->code);
  auto* s = reinterpret_cast<PCRE2_SPTR>(subject.data());
  size_t pos = 0;
  size_t last_end = static_cast<size_t>(-1);
  while (pos <= subject.size()) {
    int rc = pcre2_match(code_->code, s, subject.size(), pos, PCRE2_NO_UTF_CHECK, data.md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)  // deep backtracking: retry without JIT (heap stack)
      rc = pcre2_match(code_->code, s, subject.size(), pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT,
                       data.md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("{}: regex match failed: {}", where_, pcre2_message(rc));
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    size_t b = ov[0], e = ov[1];
    if (b == e) {
      // An empty match: keep it unless it touches the previous match, then step one character.
      if (b != last_end) out.emplace_back(b, e);
      if (b >= subject.size()) break;
      pos = b + utf8::seq_len(static_cast<unsigned char>(subject[b]));
    } else {
      out.emplace_back(b, e);
      pos = e;
    }
    last_end = e;
  }
  return out;
}

}  // namespace fp4lm::tokenizer
