// The structured-output recognizer and its front ends: which texts each grammar accepts (full
// match), and the errors bad specs give.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "engine/structured/automaton.h"
#include "engine/structured/byte_grammar.h"
#include "engine/structured/gbnf.h"
#include "engine/structured/grammar_error.h"
#include "engine/structured/json_schema.h"
#include "engine/structured/regex_syntax.h"
#include "engine/structured/spec.h"

namespace fp4lm::engine::structured::structured_grammar_test {
namespace {

// Whether the whole of `text` is a sentence of the grammar (and, if not, whether it is a prefix).
struct Match {
  bool complete = false, prefix = false;
};
Match run(Automaton& a, const std::string& text) {
  int32_t s = a.initial();
  for (unsigned char c : text) {
    s = a.next(s, c);
    if (s == Automaton::kDead) return {};
  }
  return {a.accepting(s), true};
}

Automaton regex(const std::string& re) {
  ExprGrammar g;
  g.define("root", parse_regex(re));
  return Automaton(lower(g));
}
Automaton schema(const std::string& s) { return Automaton(lower(compile_json_schema(s))); }
Automaton gbnf(const std::string& s) { return Automaton(lower(parse_gbnf(s))); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "no error";
}

TEST(StructuredRegex, MatchesWholeStringsOnly) {
  auto a = regex("(ab|c)+[0-9]{2,3}");
  EXPECT_TRUE(run(a, "ab12").complete);
  EXPECT_TRUE(run(a, "cabc123").complete);
  EXPECT_FALSE(run(a, "ab1").complete);
  EXPECT_TRUE(run(a, "ab1").prefix);
  EXPECT_FALSE(run(a, "ab1234").prefix);
  EXPECT_FALSE(run(a, "12").prefix);
  EXPECT_FALSE(run(a, "").complete);
}

TEST(StructuredRegex, ClassesEscapesAndUnicode) {
  auto a = regex(R"(^\d+\.\w\s[^a-c]é.?$)");
  EXPECT_TRUE(run(a, "12.x d\xC3\xA9").complete);
  EXPECT_TRUE(run(a, "1._\t\xE2\x82\xAC\xC3\xA9z").complete);  // [^a-c] takes a 3-byte €
  EXPECT_FALSE(run(a, "1.x a\xC3\xA9").prefix);
  EXPECT_FALSE(run(a, "1.x d\xC3\xA9\n").complete);  // '.' excludes newlines
  // A multi-byte character can be consumed byte by byte: the prefix of its encoding is alive.
  EXPECT_TRUE(run(a, "1.x d\xC3").prefix);
  auto b = regex(R"(\u00e9\x41[\u0100-\u017F]{2})");
  EXPECT_TRUE(run(b, "\xC3\xA9" "A\xC4\x80\xC5\xBF").complete);
  EXPECT_FALSE(run(b, "\xC3\xA9" "A\xC6\x80").prefix);
}

TEST(StructuredRegex, RepetitionBounds) {
  auto a = regex("a{2}b{1,}c{0,2}");
  EXPECT_TRUE(run(a, "aab").complete);
  EXPECT_TRUE(run(a, "aabbbcc").complete);
  EXPECT_FALSE(run(a, "aabccc").prefix);
  EXPECT_FALSE(run(a, "ab").complete);
}

TEST(StructuredRegex, UnsupportedConstructsNameThemselves) {
  EXPECT_NE(error_of([] { parse_regex("a(?=b)"); }).find("lookaround"), std::string::npos);
  EXPECT_NE(error_of([] { parse_regex("(a)\\1"); }).find("backreferences"), std::string::npos);
  EXPECT_NE(error_of([] { parse_regex("\\bword"); }).find("word boundaries"), std::string::npos);
  EXPECT_NE(error_of([] { parse_regex("(ab"); }).find("missing ')'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_regex("[a-"); }).find("unterminated character class"), std::string::npos);
  EXPECT_NE(error_of([] { parse_regex("a{3,1}"); }).find("n < m"), std::string::npos);
  EXPECT_NE(error_of([] { parse_regex("*a"); }).find("nothing to repeat"), std::string::npos);
  EXPECT_NE(error_of([] { lower([] { ExprGrammar g; g.define("root", parse_regex("(a*)*")); return g; }()); })
                .find("empty string"),
            std::string::npos);
}

TEST(StructuredGbnf, ArithmeticGrammar) {
  auto a = gbnf(R"G(
# integer arithmetic
root ::= expr
expr ::= term ( [-+] term )*
term ::= factor ( ("*" | "/") factor )*
factor ::= [0-9]+ | "(" expr ")"
)G");
  EXPECT_TRUE(run(a, "1+2*(3-4)/5").complete);
  EXPECT_TRUE(run(a, "(((7)))").complete);
  EXPECT_FALSE(run(a, "1+").complete);
  EXPECT_TRUE(run(a, "1+").prefix);
  EXPECT_FALSE(run(a, "1++2").prefix);
  EXPECT_FALSE(run(a, "(1").complete);
}

TEST(StructuredGbnf, LiteralsClassesAndRepetition) {
  auto a = gbnf("root ::= 'x' \"\\n\\u00e9\" [^\\]a]{2,3} ws?\nws ::= [ \\t]+");
  EXPECT_TRUE(run(a, "x\n\xC3\xA9" "bc").complete);
  EXPECT_TRUE(run(a, "x\n\xC3\xA9" "bcd \t").complete);
  EXPECT_FALSE(run(a, "x\n\xC3\xA9" "ab").prefix);
  EXPECT_FALSE(run(a, "x\n\xC3\xA9" "b]").prefix);
}

TEST(StructuredGbnf, ErrorsNameTheProblem) {
  EXPECT_NE(error_of([] { lower(parse_gbnf("root ::= foo")); }).find("undefined rule 'foo'"), std::string::npos);
  EXPECT_NE(error_of([] { lower(parse_gbnf("start ::= \"a\"")); }).find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(error_of([] { lower(parse_gbnf("root ::= root \"a\" | \"b\"")); }).find("'root' is left-recursive"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_gbnf("root ::= \"a\"\nx ::= (\"b\""); }).find("missing ')' (line 2"), std::string::npos);
  EXPECT_NE(error_of([] { parse_gbnf("root = \"a\""); }).find("expected '::='"), std::string::npos);
  EXPECT_NE(error_of([] { parse_gbnf("root ::= \"a"); }).find("unterminated string literal"), std::string::npos);
  EXPECT_NE(error_of([] { parse_gbnf("root ::= \"a\"\nroot ::= \"b\""); }).find("defined twice"), std::string::npos);
}

TEST(StructuredJsonSchema, ObjectsWithRequiredAndOptionalProperties) {
  auto a = schema(R"({"type":"object","properties":{"name":{"type":"string"},"age":{"type":"integer"},
                      "tags":{"type":"array","items":{"type":"string"},"maxItems":2}},"required":["name"]})");
  EXPECT_TRUE(run(a, R"({"name":"Bo"})").complete);
  EXPECT_TRUE(run(a, R"({"name":"Bo","age":-3})").complete);
  EXPECT_TRUE(run(a, R"({ "name": "B\"o\u00e9", "tags": ["a", "b"] })").complete);
  EXPECT_TRUE(run(a, "{\n  \"name\": \"x\",\n  \"age\": 0\n}").complete);
  EXPECT_FALSE(run(a, R"({"age":3})").prefix);                   // required name first
  EXPECT_FALSE(run(a, R"({"name":"Bo","extra":1})").prefix);     // additionalProperties absent = false
  EXPECT_FALSE(run(a, R"({"name":"Bo","tags":["a","b","c"]})").prefix);  // maxItems
  EXPECT_FALSE(run(a, R"({"name":"Bo","age":01})").prefix);      // no leading zeros
  EXPECT_FALSE(run(a, R"({"name":"Bo","age":1.5})").prefix);     // integer
  EXPECT_FALSE(run(a, "{\"name\":\"a\nb\"}").prefix);             // raw newline inside a string
  EXPECT_FALSE(run(a, R"({"name":"Bo",})").prefix);
}

TEST(StructuredJsonSchema, EnumsConstsAnyOfRefsAndStrings) {
  auto a = schema(R"({"$defs":{"node":{"type":"object","properties":{"v":{"enum":["x",1,null]},
                      "next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},
                      "$ref":"#/$defs/node"})");
  EXPECT_TRUE(run(a, R"({"v":"x","next":{"v":1,"next":{"v":null,"next":null}}})").complete);
  EXPECT_FALSE(run(a, R"({"v":"y")").prefix);
  auto b = schema(R"({"type":"object","properties":{"id":{"type":"string","format":"uuid"},
                      "code":{"type":"string","pattern":"^[A-Z]{2}-\\d+$"},"n":{"type":"string","minLength":2,"maxLength":3},
                      "k":{"const":"fixed"},"b":{"type":["boolean","null"]},"x":{"type":"number","minimum":0}},
                      "required":["id","code","n","k","b","x"]})");
  EXPECT_TRUE(run(b, R"({"id":"123e4567-e89b-12d3-a456-426614174000","code":"AB-12","n":"ab","k":"fixed","b":true,"x":2.5e3})").complete);
  EXPECT_FALSE(run(b, R"({"id":"123e4567-e89b-12d3-a456-42661417400Z")").prefix);
  EXPECT_FALSE(run(b, R"({"id":"123e4567-e89b-12d3-a456-426614174000","code":"ab)").prefix);
  EXPECT_FALSE(run(b, R"({"id":"123e4567-e89b-12d3-a456-426614174000","code":"AB-12","n":"abcd)").prefix);
  EXPECT_FALSE(run(b, R"({"id":"123e4567-e89b-12d3-a456-426614174000","code":"AB-12","n":"a")").prefix);
  EXPECT_FALSE(run(b, R"({"id":"123e4567-e89b-12d3-a456-426614174000","code":"AB-12","n":"ab","k":"fixed","b":true,"x":-)").prefix);
}

TEST(StructuredJsonSchema, AdditionalPropertiesAndAnyValue) {
  auto a = schema(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(run(a, R"({})").complete);
  EXPECT_TRUE(run(a, R"({"a":1,"b":2})").complete);
  EXPECT_FALSE(run(a, R"({"a":"s")").prefix);
  Automaton any(lower(any_json_object()));
  EXPECT_TRUE(run(any, R"({"a":[1,{"b":null},"c",true,-0.5e-3],"d":{}})").complete);
  EXPECT_FALSE(run(any, R"([1])").prefix);  // json_object: the top level is an object
  EXPECT_FALSE(run(any, R"({"a":tru})").prefix);
}

TEST(StructuredJsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"object","minProperties":1})"); })
                .find("unsupported keyword 'minProperties' at #"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"properties":{"a":{"type":"string","contentEncoding":"x"}}})"); })
                .find("unsupported keyword 'contentEncoding' at #/properties/a"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"strin"})"); }).find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"$ref":"#/$defs/none"})"); }).find("points to nothing"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":)"); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"string","format":"email"})"); })
                .find("unsupported string format '\"email\"'"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"integer","maximum":5})"); }).find("'maximum'"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"object","properties":{},"required":["x"]})"); })
                .find("required property 'x'"),
            std::string::npos);
}

TEST(StructuredSpec, ChoiceAndRegexSpecs) {
  StructuredSpec c{StructuredSpec::Kind::Choice, "", {"yes", "no", "maybe so"}, "structured_outputs.choice"};
  Automaton a(lower(to_grammar(c)));
  EXPECT_TRUE(run(a, "maybe so").complete);
  EXPECT_FALSE(run(a, "ye").complete);
  EXPECT_FALSE(run(a, "yess").prefix);
  StructuredSpec empty{StructuredSpec::Kind::Choice, "", {}, ""};
  EXPECT_NE(error_of([&] { to_grammar(empty); }).find("empty"), std::string::npos);
}

TEST(StructuredAutomaton, AmbiguousGrammarsKeepEveryParse) {
  // Both alternatives share the prefix "ab"; the state holds two stacks until they diverge.
  auto a = gbnf("root ::= \"ab\" \"c\"* | \"a\" [a-z] \"d\"");
  EXPECT_TRUE(run(a, "ab").complete);
  EXPECT_TRUE(run(a, "abd").complete);
  EXPECT_TRUE(run(a, "abccc").complete);
  EXPECT_FALSE(run(a, "abcd").prefix);
  EXPECT_TRUE(a.finished(a.next(a.next(a.next(a.initial(), 'a'), 'b'), 'd')));
  EXPECT_FALSE(a.finished(a.next(a.next(a.initial(), 'a'), 'b')));
}

}  // namespace
}  // namespace fp4lm::engine::structured::structured_grammar_test
