#include "tokenizer/normalizers.h"

#include <cstdlib>

#include <utf8proc.h>

#include "core/error.h"
#include "tokenizer/utf8.h"

namespace fp4lm::tokenizer {

namespace {

bool is_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

}  // namespace

void UnicodeNormalizer::normalize(std::string& s) const {
  // ASCII text is invariant under every normalization form; skip the library call.
  if (is_ascii(s)) return;
  int opts = UTF8PROC_STABLE;
  switch (form_) {
    case Form::NFC: opts |= UTF8PROC_COMPOSE; break;
    case Form::NFD: opts |= UTF8PROC_DECOMPOSE; break;
    case Form::NFKC: opts |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case Form::NFKD: opts |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                    static_cast<utf8proc_ssize_t>(s.size()), &out,
                                    static_cast<utf8proc_option_t>(opts));
  if (n < 0) fail("unicode normalization failed: {}", utf8proc_errmsg(n));
  s.assign(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
}

void LowercaseNormalizer::normalize(std::string& s) const {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t cp = utf8::next(s, i);
    utf8::append(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
  }
  s = std::move(out);
}

void ReplaceNormalizer::normalize(std::string& s) const {
  auto matches = pattern_->find_all(s);
  if (matches.empty()) return;
  std::string out;
  out.reserve(s.size() + matches.size() * content_.size());
  size_t prev = 0;
  for (auto [b, e] : matches) {
    out.append(s, prev, b - prev);
    out.append(content_);
    prev = e;
  }
  out.append(s, prev, std::string::npos);
  s = std::move(out);
}

void PrependNormalizer::normalize(std::string& s) const {
  if (!s.empty()) s.insert(0, prefix_);
}

void StripNormalizer::normalize(std::string& s) const {
  size_t b = 0, e = s.size();
  if (left_) {
    while (b < e) {
      size_t i = b;
      if (!utf8::is_whitespace(utf8::next(s, i))) break;
      b = i;
    }
  }
  if (right_) {
    while (e > b) {
      size_t start;
      if (!utf8::is_whitespace(utf8::prev(s, e, start))) break;
      e = start;
    }
  }
  s = s.substr(b, e - b);
}

}  // namespace fp4lm::tokenizer
