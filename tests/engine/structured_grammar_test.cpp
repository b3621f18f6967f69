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
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"integer","multipleOf":3})"); })
                .find("unsupported keyword 'multipleOf' at #"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"properties":{"a":{"type":"string","contentEncoding":"x"}}})"); })
                .find("unsupported keyword 'contentEncoding' at #/properties/a"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"strin"})"); }).find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"$ref":"#/$defs/none"})"); }).find("points to nothing"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":)"); }).find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"string","format":"idn-email"})"); })
                .find("unsupported string format \"idn-email\" (supported: date, date-time, email, hostname, ipv4, ipv6, time, uri, uuid)"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"integer","minimum":5,"exclusiveMaximum":5})"); })
                .find("no integer satisfies minimum 5 and exclusiveMaximum 5 at #"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"properties":{"a":{"type":"number","maximum":"3"}}})"); })
                .find("'maximum' must be a number at #/properties/a"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"object","properties":{},"required":["x"]})"); })
                .find("required property 'x'"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"object","properties":{"a":{}},"minProperties":2})"); })
                .find("no object satisfies 'minProperties' / 'maxProperties'"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"prefixItems":[{}],"minItems":2})"); })
                .find("'minItems' 2 needs more items than the 1 the array allows"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"patternProperties":{"^a":{}},"additionalProperties":true})"); })
                .find("together with 'patternProperties'"),
            std::string::npos);
  EXPECT_NE(error_of([] { compile_json_schema(R"({"type":"array","uniqueItems":true})"); })
                .find("unsupported keyword 'uniqueItems' (true)"),
            std::string::npos);
}

TEST(StructuredJsonSchema, NumericBounds) {
  auto a = schema(R"({"type":"object","properties":{"age":{"type":"integer","minimum":0,"maximum":120},
                      "t":{"type":"number","exclusiveMinimum":-1.5,"exclusiveMaximum":1e2},
                      "old":{"type":"integer","maximum":10,"exclusiveMaximum":true}},"required":["age","t"]})");
  for (int age = -5; age <= 130; ++age)
    EXPECT_EQ(run(a, R"({"age":)" + std::to_string(age) + R"(,"t":0})").complete, age >= 0 && age <= 120) << age;
  for (const char* t : {"-1.4", "-1", "0", "99.99", "99", "0.001", "-1.49999"})
    EXPECT_TRUE(run(a, std::string(R"({"age":1,"t":)") + t + "}").complete) << t;
  for (const char* t : {"-1.5", "-1.50", "-2", "100", "100.0", "1e1", "99.999999999999999"})
    EXPECT_FALSE(run(a, std::string(R"({"age":1,"t":)") + t + "}").complete) << t;
  EXPECT_TRUE(run(a, R"({"age":1,"t":0,"old":9})").complete);
  EXPECT_FALSE(run(a, R"({"age":1,"t":0,"old":10})").complete);  // draft 4: exclusiveMaximum true
  // Huge bounds, exactly; a bound given twice takes the tighter.
  auto b = schema(R"({"type":"integer","minimum":-9223372036854775808,"maximum":18446744073709551615,
                      "exclusiveMaximum":9223372036854775000})");
  EXPECT_TRUE(run(b, "9223372036854774999").complete);
  EXPECT_FALSE(run(b, "9223372036854775000").complete);
  EXPECT_TRUE(run(b, "-9223372036854775808").complete);
  EXPECT_FALSE(run(b, "-9223372036854775809").complete);
  auto big = schema(R"({"type":"integer","exclusiveMinimum":1e30})");  // a double bound: its exact value
  EXPECT_FALSE(run(big, "1000000000000000019884624838656").complete);
  EXPECT_TRUE(run(big, "1000000000000000019884624838657").complete);
  // minimum 0 alone keeps every non-negative JSON number.
  auto c = schema(R"({"type":"number","minimum":0})");
  EXPECT_TRUE(run(c, "2.5e3").complete);
  EXPECT_FALSE(run(c, "-1").prefix);
}

TEST(StructuredJsonSchema, PropertyCountsAndPatternProperties) {
  auto a = schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
                      "minProperties":1,"maxProperties":2})");
  EXPECT_FALSE(run(a, "{}").complete);
  EXPECT_TRUE(run(a, R"({"b":1})").complete);
  EXPECT_TRUE(run(a, R"({"a":1,"c":2})").complete);
  EXPECT_FALSE(run(a, R"({"a":1,"b":2,"c":3})").complete);
  auto b = schema(R"({"type":"object","properties":{"id":{"type":"integer"}},"required":["id"],
                      "additionalProperties":{"type":"string"},"minProperties":2,"maxProperties":3})");
  EXPECT_FALSE(run(b, R"({"id":1})").complete);
  EXPECT_TRUE(run(b, R"({"id":1,"x":"a"})").complete);
  EXPECT_TRUE(run(b, R"({"id":1,"x":"a","y":"b"})").complete);
  EXPECT_FALSE(run(b, R"({"id":1,"x":"a","y":"b","z":"c"})").complete);
  auto c = schema(R"({"type":"object","patternProperties":{"^S_[a-z]+$":{"type":"string"},"^I_[0-9]+$":{"type":"integer"}},
                      "maxProperties":2})");
  EXPECT_TRUE(run(c, R"({})").complete);
  EXPECT_TRUE(run(c, R"({"S_ab":"x","I_7":3})").complete);
  EXPECT_FALSE(run(c, R"({"S_ab":3})").complete);
  EXPECT_FALSE(run(c, R"({"X":"x"})").prefix);
  EXPECT_FALSE(run(c, R"({"S_a":"x","I_1":1,"I_2":2})").complete);
}

TEST(StructuredJsonSchema, PrefixItemsAndItemCounts) {
  auto a = schema(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":{"type":"boolean"},
                      "minItems":1,"maxItems":4})");
  EXPECT_FALSE(run(a, "[]").complete);
  EXPECT_TRUE(run(a, "[1]").complete);
  EXPECT_TRUE(run(a, R"([1,"a"])").complete);
  EXPECT_TRUE(run(a, R"([1,"a",true,false])").complete);
  EXPECT_FALSE(run(a, R"([1,"a",true,false,true])").complete);
  EXPECT_FALSE(run(a, R"(["a"])").prefix);
  EXPECT_FALSE(run(a, R"([1,"a",3])").prefix);
  auto b = schema(R"({"prefixItems":[{"const":1},{"const":2}]})");  // strict: nothing after the prefix
  EXPECT_TRUE(run(b, "[1, 2]").complete);
  EXPECT_FALSE(run(b, "[1, 2, 3").prefix);
  auto c = schema(R"({"items":[{"type":"null"}],"additionalItems":{"type":"integer"},"minItems":3})");  // draft 4
  EXPECT_TRUE(run(c, "[null,1,2]").complete);
  EXPECT_FALSE(run(c, "[null,1]").complete);
  auto d = schema(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})");
  EXPECT_FALSE(run(d, "[1]").complete);
  EXPECT_TRUE(run(d, "[1,2]").complete);
  EXPECT_TRUE(run(d, "[1,2,3]").complete);
  EXPECT_FALSE(run(d, "[1,2,3,4]").complete);
}

TEST(StructuredJsonSchema, StringFormats) {
  auto fmt_of = [](const std::string& f) { return schema(R"({"type":"string","format":")" + f + R"("})"); };
  auto ok = [](Automaton& a, const std::string& v) { return run(a, "\"" + v + "\"").complete; };
  auto ipv4 = fmt_of("ipv4");
  EXPECT_TRUE(ok(ipv4, "192.168.0.1"));
  EXPECT_TRUE(ok(ipv4, "255.255.255.255"));
  EXPECT_FALSE(ok(ipv4, "256.1.1.1"));
  EXPECT_FALSE(ok(ipv4, "01.1.1.1"));
  EXPECT_FALSE(ok(ipv4, "1.1.1"));
  auto ipv6 = fmt_of("ipv6");
  for (const char* v : {"::", "::1", "fe80::1", "2001:db8:85a3:0:0:8a2e:370:7334", "2001:db8::8a2e:370:7334", "1::"})
    EXPECT_TRUE(ok(ipv6, v)) << v;
  for (const char* v : {":::", "1:2:3:4:5:6:7:8:9", "12345::", "1::2::3", "g::1"}) EXPECT_FALSE(ok(ipv6, v)) << v;
  auto host = fmt_of("hostname");
  EXPECT_TRUE(ok(host, "example.com"));
  EXPECT_TRUE(ok(host, "a-b.c1"));
  EXPECT_FALSE(ok(host, "-a.com"));
  EXPECT_FALSE(ok(host, "a..com"));
  EXPECT_FALSE(ok(host, "a_b.com"));
  auto email = fmt_of("email");
  EXPECT_TRUE(ok(email, "jo.doe+tag@example.com"));
  EXPECT_TRUE(ok(email, "x@[10.0.0.1]"));
  EXPECT_FALSE(ok(email, "jo..doe@example.com"));
  EXPECT_FALSE(ok(email, "jo doe@example.com"));
  EXPECT_FALSE(ok(email, "@example.com"));
  auto uri = fmt_of("uri");
  EXPECT_TRUE(ok(uri, "https://example.com/a/b?q=1&r=%20#frag"));
  EXPECT_TRUE(ok(uri, "urn:isbn:0451450523"));
  EXPECT_FALSE(ok(uri, "/relative/path"));
  EXPECT_FALSE(ok(uri, "https://exa mple.com"));
  EXPECT_FALSE(ok(uri, "a:b#c#d"));
}

TEST(StructuredJsonSchema, WhitespaceIsBoundedOrCompact) {
  const std::string s = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},"b":{"type":"string"}}})";
  auto loose = Automaton(lower(compile_json_schema(s)));
  EXPECT_TRUE(run(loose, "{\n  \"a\": [ 1 ,\n    2 ],\n  \"b\": \"x\"\n}").complete);
  EXPECT_FALSE(run(loose, "{" + std::string(2, ' ')).prefix);  // one space at most without a newline
  EXPECT_TRUE(run(loose, "{\n" + std::string(20, ' ')).prefix);
  EXPECT_FALSE(run(loose, "{\n" + std::string(21, ' ')).prefix);
  auto narrow = Automaton(lower(compile_json_schema(s, {false, 2})));
  EXPECT_TRUE(run(narrow, "{\n  \"a\": []}").complete);
  EXPECT_FALSE(run(narrow, "{\n   ").prefix);
  auto compact = Automaton(lower(compile_json_schema(s, {true, 20})));
  EXPECT_TRUE(run(compact, R"({"a": [1, 2], "b": "x"})").complete);
  EXPECT_FALSE(run(compact, R"({"a":[1,2]})").prefix);
  EXPECT_FALSE(run(compact, R"({ "a")").prefix);
  EXPECT_FALSE(run(compact, "{\"a\": [1,\n").prefix);
  Automaton any(lower(any_json_object({true, 20})));
  EXPECT_TRUE(run(any, R"({"k": {"x": [true, null]}})").complete);
  EXPECT_FALSE(run(any, R"({"k" : 1})").prefix);
  // The compile cache tells the two apart.
  StructuredSpec x{StructuredSpec::Kind::JsonSchema, s, {}, "p"}, y = x;
  y.whitespace.compact = true;
  EXPECT_NE(x.key(), y.key());
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
