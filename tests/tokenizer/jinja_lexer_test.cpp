// Lexing: tag delimiters, whitespace control with Hugging Face's settings (trim_blocks,
// lstrip_blocks), comments, raw blocks, string escapes, and errors with line and column.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace fp4lm::tokenizer::jinja::jinja_lexer_test {
namespace {

using ::testing::HasSubstr;

std::string R(const std::string& tmpl) { return render(parse(tmpl), {}); }

TemplateError lex_error(const std::string& tmpl) {
  try {
    lex(tmpl);
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for " << tmpl;
  return TemplateError({}, "");
}

TEST(JinjaLexer, TokenStreamOfATag) {
  auto toks = lex("ab{{ x.y[0] | f('s', 1.5) }}");
  std::vector<std::pair<TokenKind, std::string>> got;
  for (const auto& t : toks) got.emplace_back(t.kind, t.text);
  std::vector<std::pair<TokenKind, std::string>> want = {
      {TokenKind::Text, "ab"},       {TokenKind::VarBegin, "{{"},  {TokenKind::Name, "x"},
      {TokenKind::Operator, "."},    {TokenKind::Name, "y"},       {TokenKind::Operator, "["},
      {TokenKind::Integer, "0"},     {TokenKind::Operator, "]"},   {TokenKind::Operator, "|"},
      {TokenKind::Name, "f"},        {TokenKind::Operator, "("},   {TokenKind::String, "s"},
      {TokenKind::Operator, ","},    {TokenKind::Float, "1.5"},    {TokenKind::Operator, ")"},
      {TokenKind::VarEnd, "}}"},     {TokenKind::End, ""}};
  EXPECT_EQ(got, want);
}

TEST(JinjaLexer, PositionsAreLineAndColumn) {
  auto toks = lex("a\n  {% if x %}");
  ASSERT_GE(toks.size(), 3u);
  EXPECT_EQ(toks[1].kind, TokenKind::BlockBegin);
  EXPECT_EQ(toks[1].pos.line, 2);
  EXPECT_EQ(toks[1].pos.column, 3);
  EXPECT_EQ(toks[3].text, "x");
  EXPECT_EQ(toks[3].pos.column, 9);
}

TEST(JinjaLexer, DictLiteralInsideOutputTagIsNotTheEnd) {
  EXPECT_EQ(R("{{ {'a': {'b': 1}} }}"), "{'a': {'b': 1}}");
}

TEST(JinjaLexer, MinusStripsWhitespaceIncludingNewlines) {
  EXPECT_EQ(R("a  {%- if true %}b{% endif %}"), "ab");
  EXPECT_EQ(R("a \n {{- 'b' -}} \n c"), "abc");
  EXPECT_EQ(R("a {#- c -#} b"), "ab");
  EXPECT_EQ(R("x\n\n{%- if true -%}\n\n y{%- endif %}"), "xy");
}

TEST(JinjaLexer, TrimBlocksRemovesOneNewlineAfterABlockTag) {
  EXPECT_EQ(R("{% if true %}\nyes\n{% endif %}\nno"), "yes\nno");
  EXPECT_EQ(R("{% for x in [1,2] %}\n  {{ x }}\n{% endfor %}\n"), "  1\n  2\n");
  // ... but not after an output tag
  EXPECT_EQ(R("{{ 'x' }}\ny"), "x\ny");
}

TEST(JinjaLexer, LstripBlocksRemovesIndentBeforeABlockTag) {
  EXPECT_EQ(R("  {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(R("\t{% if true %}\n\tq\n\t{% endif %}\n"), "\tq\n");
  // only when the tag starts the line
  EXPECT_EQ(R("a  {% if true %}x{% endif %}"), "a  x");
  EXPECT_EQ(R("x {% if true %} y {% endif %} z"), "x  y  z");
}

TEST(JinjaLexer, PlusDisablesBlockTrimming) {
  EXPECT_EQ(R("  {%+ if true %}x{% endif %}"), "  x");
  EXPECT_EQ(R("{% if true +%}\nx{% endif %}"), "\nx");
}

TEST(JinjaLexer, CommentsVanishAndTheirLineToo) {
  EXPECT_EQ(R("a{# c #}b"), "ab");
  EXPECT_EQ(R("a\n  {# c #}\nb"), "a\nb");
}

TEST(JinjaLexer, OneTrailingNewlineIsDroppedAndCrlfNormalized) {
  EXPECT_EQ(R("hi\n"), "hi");
  EXPECT_EQ(R("hi\n\n"), "hi\n");
  EXPECT_EQ(R("a\r\nb\rc"), "a\nb\nc");
}

TEST(JinjaLexer, RawBlockIsText) {
  EXPECT_EQ(R("{% raw %}{{ x }}{% if %}{% endraw %}"), "{{ x }}{% if %}");
  EXPECT_EQ(R("a{% raw -%}  {{ x }}  {%- endraw %}b"), "a{{ x }}b");
}

TEST(JinjaLexer, StringEscapes) {
  EXPECT_EQ(R(R"({{ 'a\tb\n' ~ "q\"" ~ '\u00e9\x41' ~ 'it\'s' ~ '\z' }})"), "a\tb\nq\"\xc3\xa9" "Ait's\\z");
}

TEST(JinjaLexer, ErrorsCarryLineAndColumn) {
  {
    auto e = lex_error("ok\n{{ x ");
    EXPECT_EQ(e.pos().line, 2);
    EXPECT_EQ(e.pos().column, 1);
    EXPECT_THAT(e.what(), HasSubstr("unclosed tag"));
  }
  {
    auto e = lex_error("{{ 'abc }}");
    EXPECT_EQ(e.pos().column, 4);
    EXPECT_THAT(e.what(), HasSubstr("unterminated string"));
  }
  {
    auto e = lex_error("{# never closed");
    EXPECT_THAT(e.what(), HasSubstr("unclosed comment"));
  }
  {
    auto e = lex_error("\n\n   {{ a ! b }}");
    EXPECT_EQ(e.pos().line, 3);
    EXPECT_EQ(e.pos().column, 9);
  }
  {
    auto e = lex_error("{{ (a ] }}");
    EXPECT_EQ(e.pos().column, 7);
    EXPECT_THAT(e.what(), HasSubstr("unexpected ']'"));
  }
  {
    auto e = lex_error("{% raw %}abc");
    EXPECT_THAT(e.what(), HasSubstr("endraw"));
  }
}

}  // namespace
}  // namespace fp4lm::tokenizer::jinja::jinja_lexer_test
