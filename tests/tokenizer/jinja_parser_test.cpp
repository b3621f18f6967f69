// Parsing: statements, precedence, and the errors for unsupported or malformed syntax, each
// with its line and column; nesting limits that keep recursion bounded.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace fp4lm::tokenizer::jinja::jinja_parser_test {
namespace {

using ::testing::HasSubstr;

struct Expected {
  int line, column;
  const char* text;
};

void expect_error(const std::string& tmpl, Expected want) {
  try {
    Program p = parse(tmpl);
    validate(p);
    ADD_FAILURE() << "no error for: " << tmpl;
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.pos().line, want.line) << tmpl << " -> " << e.what();
    EXPECT_EQ(e.pos().column, want.column) << tmpl << " -> " << e.what();
    EXPECT_THAT(e.what(), HasSubstr(want.text)) << tmpl;
  }
}

TEST(JinjaParser, ParsesStatementsIntoATree) {
  Program p = parse("a{% if x %}b{% elif y %}c{% else %}d{% endif %}{% for k, v in m if v %}{% endfor %}");
  ASSERT_EQ(p.body.size(), 3u);
  EXPECT_EQ(p.body[0]->kind, Stmt::Kind::Text);
  ASSERT_EQ(p.body[1]->kind, Stmt::Kind::If);
  EXPECT_EQ(p.body[1]->conds.size(), 2u);
  EXPECT_EQ(p.body[1]->else_body.size(), 1u);
  ASSERT_EQ(p.body[2]->kind, Stmt::Kind::For);
  EXPECT_EQ(p.body[2]->targets, (std::vector<std::string>{"k", "v"}));
  EXPECT_NE(p.body[2]->cond, nullptr);
}

TEST(JinjaParser, FilterBindsTighterThanArithmeticAndTestsTighterThanAnd) {
  Program p = parse("{{ messages|length - 1 }}");
  const Expr& e = *p.body[0]->expr;
  ASSERT_EQ(e.kind, Expr::Kind::Binary);
  EXPECT_EQ(e.name, "-");
  EXPECT_EQ(e.a->kind, Expr::Kind::Filter);

  Program q = parse("{{ a is defined and b is not none }}");
  const Expr& f = *q.body[0]->expr;
  ASSERT_EQ(f.kind, Expr::Kind::And);
  EXPECT_EQ(f.a->kind, Expr::Kind::Test);
  EXPECT_EQ(f.b->kind, Expr::Kind::Test);
  EXPECT_TRUE(f.b->negate);
}

TEST(JinjaParser, SyntaxErrorsNameLineAndColumn) {
  expect_error("line1\n{{ a + }}", {2, 8, "unexpected '}}'"});
  expect_error("{% if x %}\n  {% endfor %}", {2, 6, "unexpected '{% endfor %}'"});
  expect_error("{% for x in y %}abc", {1, 4, "never closed"});
  expect_error("{% if x %}{% for y in z %}{% endif %}", {1, 30, "unexpected '{% endif %}'"});
  expect_error("{% include 'other.jinja' %}", {1, 4, "unsupported tag '{% include %}'"});
  expect_error("{% extends 'base' %}", {1, 4, "unsupported tag"});
  expect_error("{% filter upper %}x{% endfilter %}", {1, 4, "unsupported tag"});
  expect_error("\n{{ x | frobnicate }}", {2, 8, "unknown filter 'frobnicate'"});
  expect_error("{{ x is frobnicated }}", {1, 9, "unknown test 'frobnicated'"});
  expect_error("{% break %}", {1, 4, "'break' outside a loop"});
  expect_error("{% for x in y recursive %}{% endfor %}", {1, 15, "recursive"});
  expect_error("{{ 1 < 2 < 3 }}", {1, 10, "chained comparisons"});
  expect_error("{% set = 1 %}", {1, 8, "expected a variable name"});
  expect_error("{{ f(a=1, 2) }}", {1, 11, "positional argument after keyword"});
  expect_error("{{ 99999999999999999999 }}", {1, 4, "out of range"});
  expect_error("{{ }}", {1, 4, "expected an expression"});
  expect_error("{% %}", {1, 4, "expected a statement name"});
}

TEST(JinjaParser, DeepNestingIsAnErrorNotAStackOverflow) {
  std::string parens = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_THROW(parse(parens), TemplateError);
  std::string ifs;
  for (int i = 0; i < 5000; ++i) ifs += "{% if 1 %}";
  EXPECT_THROW(parse(ifs), TemplateError);
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  EXPECT_THROW(parse(chain + " }}"), TemplateError);
  std::string nots = "{{ " ;
  for (int i = 0; i < 5000; ++i) nots += "not ";
  EXPECT_THROW(parse(nots + "1 }}"), TemplateError);
  // Moderate nesting is fine.
  std::string ok = "{{ " + std::string(50, '[') + "1" + std::string(50, ']') + "|length }}";
  EXPECT_EQ(render(parse(ok), {}), "1");
}

}  // namespace
}  // namespace fp4lm::tokenizer::jinja::jinja_parser_test
