#pragma once
// Splits a Jinja template into tokens: raw text, tag delimiters, and the tokens of the
// expressions inside tags. Whitespace control is applied here, with the settings Hugging Face
// renders chat templates with: trim_blocks and lstrip_blocks on, `-` strips all whitespace on
// that side of a tag, `+` turns the block trimming off; a single trailing newline of the
// template is dropped (keep_trailing_newline off). `{# comments #}` vanish and
// `{% raw %}...{% endraw %}` becomes text.
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace fp4lm::tokenizer::jinja {

enum class TokenKind {
  Text,        // literal template text
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,        // identifier or keyword
  String,      // string literal, escapes already resolved
  Integer,     // digits (underscores removed)
  Float,       // float literal
  Operator,    // punctuation: ( ) [ ] { } . , : | ~ + - * / // % ** = == != < <= > >=
  End,         // end of the template
};

struct Token {
  TokenKind kind;
  std::string text;
  Pos pos;
};

const char* token_kind_name(TokenKind k);

// Throws TemplateError (with line and column) on malformed input: unclosed tags, comments or
// strings, unknown characters inside a tag, unbalanced brackets.
std::vector<Token> lex(const std::string& source);

}  // namespace fp4lm::tokenizer::jinja
