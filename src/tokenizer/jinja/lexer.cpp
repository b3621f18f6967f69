#include "tokenizer/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstring>

namespace fp4lm::tokenizer::jinja {

const char* token_kind_name(TokenKind k) {
  switch (k) {
    case TokenKind::Text: return "text";
    case TokenKind::VarBegin: return "'{{'";
    case TokenKind::VarEnd: return "'}}'";
    case TokenKind::BlockBegin: return "'{%'";
    case TokenKind::BlockEnd: return "'%}'";
    case TokenKind::Name: return "name";
    case TokenKind::String: return "string";
    case TokenKind::Integer: return "integer";
    case TokenKind::Float: return "float";
    case TokenKind::Operator: return "operator";
    case TokenKind::End: return "end of template";
  }
  return "?";
}

namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

class Lexer {
 public:
  explicit Lexer(const std::string& source) {
    // Newlines are normalized to "\n" (as Jinja does) and one trailing newline is dropped.
    src_.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        src_ += '\n';
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        src_ += source[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t i = 0;
    bool strip_next = false;  // the previous tag ended with '-'
    while (true) {
      if (strip_next) {
        while (i < src_.size() && is_space(src_[i])) ++i;
        strip_next = false;
      }
      size_t j = find_tag(i);
      std::string text = src_.substr(i, (j == std::string::npos ? src_.size() : j) - i);
      if (j == std::string::npos) {
        emit_text(std::move(text), i);
        break;
      }
      char kind = src_[j + 1];
      size_t k = j + 2;
      char mod = k < src_.size() ? src_[k] : '\0';
      if (mod == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (kind != '{' && mod != '+') {
        // lstrip_blocks: spaces and tabs from the start of the line up to a block or comment tag.
        size_t nl = text.rfind('\n');
        size_t start = nl == std::string::npos ? 0 : nl + 1;
        bool at_line_start = nl != std::string::npos || i == 0 || src_[i - 1] == '\n';
        if (at_line_start &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(start), text.end(),
                        [](char c) { return c == ' ' || c == '\t'; }))
          text.erase(start);
      }
      emit_text(std::move(text), i);
      if (mod == '-' || (mod == '+' && kind != '{')) ++k;

      if (kind == '#') {
        size_t e = src_.find("#}", k);
        if (e == std::string::npos) throw TemplateError(pos_at(j), "unclosed comment '{#'");
        if (e > k && src_[e - 1] == '-') strip_next = true;
        i = e + 2;
        if (!strip_next && !(e > k && src_[e - 1] == '+')) i = trim_newline(i);
        continue;
      }
      if (kind == '%' && try_raw(j, k, i, strip_next)) continue;
      tokens_.push_back({kind == '{' ? TokenKind::VarBegin : TokenKind::BlockBegin,
                         kind == '{' ? "{{" : "{%", pos_at(j)});
      i = lex_tag(j, k, kind == '{', strip_next);
    }
    tokens_.push_back({TokenKind::End, "", pos_at(src_.size())});
    return std::move(tokens_);
  }

 private:
  Pos pos_at(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    size_t line = static_cast<size_t>(it - line_starts_.begin());  // 1-based
    size_t col = offset - line_starts_[line - 1] + 1;
    return {static_cast<int>(line), static_cast<int>(col)};
  }

  size_t find_tag(size_t from) const {
    for (size_t p = src_.find('{', from); p != std::string::npos; p = src_.find('{', p + 1))
      if (p + 1 < src_.size() && (src_[p + 1] == '{' || src_[p + 1] == '%' || src_[p + 1] == '#'))
        return p;
    return std::string::npos;
  }

  size_t trim_newline(size_t i) const { return i < src_.size() && src_[i] == '\n' ? i + 1 : i; }

  void emit_text(std::string text, size_t offset) {
    if (!text.empty()) tokens_.push_back({TokenKind::Text, std::move(text), pos_at(offset)});
  }

  size_t skip_spaces(size_t p) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    return p;
  }

  bool word_at(size_t p, const char* word) const {
    size_t n = std::strlen(word);
    if (src_.compare(p, n, word) != 0) return false;
    return p + n >= src_.size() || !(std::isalnum(static_cast<unsigned char>(src_[p + n])) || src_[p + n] == '_');
  }

  // `{% raw %}...{% endraw %}`: everything between is text. Returns false if this tag is not raw.
  bool try_raw(size_t tag_start, size_t k, size_t& i, bool& strip_next) {
    size_t p = skip_spaces(k);
    if (!word_at(p, "raw")) return false;
    p = skip_spaces(p + 3);
    bool strip_inside_start = false;
    if (src_.compare(p, 3, "-%}") == 0) {
      strip_inside_start = true;
      p += 3;
    } else if (src_.compare(p, 2, "%}") == 0) {
      p += 2;
    } else {
      return false;  // let the parser report the malformed tag
    }
    size_t body = p;
    if (strip_inside_start) body = skip_spaces(body);
    for (size_t q = src_.find("{%", body); q != std::string::npos; q = src_.find("{%", q + 2)) {
      size_t r = q + 2;
      bool strip_inside_end = false;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) strip_inside_end = src_[r++] == '-';
      r = skip_spaces(r);
      if (!word_at(r, "endraw")) continue;
      r = skip_spaces(r + 6);
      bool strip_after = false, keep_after = false;
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) {
        strip_after = src_[r] == '-';
        keep_after = src_[r] == '+';
        ++r;
      }
      if (src_.compare(r, 2, "%}") != 0) throw TemplateError(pos_at(q), "malformed '{% endraw %}'");
      std::string text = src_.substr(body, q - body);
      if (strip_inside_end)
        while (!text.empty() && is_space(text.back())) text.pop_back();
      emit_text(std::move(text), body);
      i = r + 2;
      strip_next = strip_after;
      if (!strip_after && !keep_after) i = trim_newline(i);
      return true;
    }
    throw TemplateError(pos_at(tag_start), "'{% raw %}' without '{% endraw %}'");
  }

  // Tokens of one tag's contents, up to and including its end delimiter. Returns the offset
  // after the tag.
  size_t lex_tag(size_t tag_start, size_t p, bool is_var, bool& strip_next) {
    std::vector<std::pair<char, size_t>> brackets;
    while (true) {
      p = skip_spaces(p);
      if (p >= src_.size())
        throw TemplateError(pos_at(tag_start),
                            fmt::format("unclosed tag '{}'", is_var ? "{{" : "{%"));
      if (brackets.empty()) {
        const char* close = is_var ? "}}" : "%}";
        for (char m : {'-', '+', '\0'}) {
          if (m == '+' && is_var) continue;
          size_t q = p;
          if (m) {
            if (src_[q] != m) continue;
            ++q;
          }
          if (src_.compare(q, 2, close) == 0) {
            tokens_.push_back({is_var ? TokenKind::VarEnd : TokenKind::BlockEnd, close, pos_at(p)});
            size_t after = q + 2;
            if (m == '-') strip_next = true;
            else if (!is_var && m == '\0') after = trim_newline(after);  // trim_blocks
            return after;
          }
        }
      }
      char c = src_[p];
      Pos pos = pos_at(p);
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        tokens_.push_back({TokenKind::Name, src_.substr(p, q - p), pos});
        p = q;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two)
          if (src_.compare(p, 2, t) == 0) op = t;
        if (op.empty()) {
          if (std::strchr("+-*/%~()[]{}.,:|=<>", c) == nullptr || c == '\0')
            throw TemplateError(pos, fmt::format("unexpected character '{}' in tag", c));
          op = std::string(1, c);
        }
        if (c == '(' || c == '[' || c == '{') {
          brackets.emplace_back(c, p);
        } else if (c == ')' || c == ']' || c == '}') {
          char want = c == ')' ? '(' : c == ']' ? '[' : '{';
          if (brackets.empty() || brackets.back().first != want)
            throw TemplateError(pos, fmt::format("unexpected '{}'", c));
          brackets.pop_back();
        }
        tokens_.push_back({TokenKind::Operator, op, pos});
        p += op.size();
      }
    }
  }

  size_t lex_number(size_t p) {
    Pos pos = pos_at(p);
    std::string digits;
    bool is_float = false;
    auto take_digits = [&] {
      while (p < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[p])) || src_[p] == '_')) {
        if (src_[p] != '_') digits += src_[p];
        ++p;
      }
    };
    take_digits();
    if (p + 1 < src_.size() && src_[p] == '.' && std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
      is_float = true;
      digits += '.';
      ++p;
      take_digits();
    }
    if (p < src_.size() && (src_[p] == 'e' || src_[p] == 'E')) {
      size_t q = p + 1;
      if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
      if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
        is_float = true;
        digits += 'e';
        digits.append(src_, p + 1, q - p - 1);
        p = q;
        take_digits();
      }
    }
    tokens_.push_back({is_float ? TokenKind::Float : TokenKind::Integer, digits, pos});
    return p;
  }

  size_t lex_string(size_t p) {
    Pos pos = pos_at(p);
    char quote = src_[p++];
    std::string out;
    while (true) {
      if (p >= src_.size()) throw TemplateError(pos, "unterminated string literal");
      char c = src_[p++];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (p >= src_.size()) throw TemplateError(pos, "unterminated string literal");
      char e = src_[p++];
      auto hex = [&](int n) -> uint32_t {
        if (p + static_cast<size_t>(n) > src_.size())
          throw TemplateError(pos, "truncated escape in string literal");
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          char h = src_[p++];
          int d = std::isdigit(static_cast<unsigned char>(h)) ? h - '0'
                  : (h >= 'a' && h <= 'f')                     ? h - 'a' + 10
                  : (h >= 'A' && h <= 'F')                     ? h - 'A' + 10
                                                               : -1;
          if (d < 0) throw TemplateError(pos, "bad hex digit in string escape");
          v = v * 16 + static_cast<uint32_t>(d);
        }
        return v;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case 'a': out += '\a'; break;
        case '0': out += '\0'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case '\n': break;  // line continuation
        case 'x': append_utf8(out, hex(2)); break;
        case 'u': append_utf8(out, hex(4)); break;
        case 'U': {
          uint32_t cp = hex(8);
          if (cp > 0x10FFFF) throw TemplateError(pos, "code point out of range in string escape");
          append_utf8(out, cp);
          break;
        }
        default:  // Python keeps unknown escapes as written
          out += '\\';
          out += e;
      }
    }
    tokens_.push_back({TokenKind::String, std::move(out), pos});
    return p;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(const std::string& source) { return Lexer(source).run(); }

}  // namespace fp4lm::tokenizer::jinja
