// Rendering: every construct of the Jinja subset, checked against outputs of Python's Jinja2
// (3.1, configured as Hugging Face's apply_chat_template: trim_blocks, lstrip_blocks,
// loopcontrols, json.dumps-based tojson, raise_exception), plus the places where fp4lm is
// deliberately more lenient, scoping rules, and the resource limits.
#include <gtest/gtest.h>
#include <gmock/gmock.h>

#include <nlohmann/json.hpp>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/parser.h"

namespace fp4lm::tokenizer::jinja::jinja_render_test {
namespace {

using ::testing::HasSubstr;

std::vector<std::pair<std::string, Value>> context_from(const std::string& json) {
  std::vector<std::pair<std::string, Value>> ctx;
  auto j = nlohmann::ordered_json::parse(json);
  for (auto it = j.begin(); it != j.end(); ++it) ctx.emplace_back(it.key(), Value::from_json(it.value()));
  return ctx;
}

std::string render_str(const std::string& tmpl, const std::string& ctx_json = "{}",
                       const RenderLimits& limits = {}) {
  Program p = parse(tmpl);
  validate(p);
  return render(p, context_from(ctx_json), limits);
}

struct Case {
  const char* tmpl;
  const char* ctx;
  const char* expected;
};
struct ErrorCase {
  const char* tmpl;
  const char* ctx;
};

// {template, context (JSON), expected output}; expected outputs produced by Python Jinja2 3.1
// configured as Hugging Face's apply_chat_template configures it.
const Case kCases[] = {
    {"a  {%- if true %}b{% endif %}",
     "{}",
     "ab"},
    {"{% if true %}\nyes\n{% endif %}\nno",
     "{}",
     "yes\nno"},
    {"  {% if true %}x{% endif %}",
     "{}",
     "x"},
    {"a  {% if true %}x{% endif %}",
     "{}",
     "a  x"},
    {"a \n {{- 'b' -}} \n c",
     "{}",
     "abc"},
    {"  {%+ if true %}x{% endif %}",
     "{}",
     "  x"},
    {"{% if true +%}\nx{% endif %}",
     "{}",
     "\nx"},
    {"hi\n",
     "{}",
     "hi"},
    {"hi\n\n",
     "{}",
     "hi\n"},
    {"a\r\nb",
     "{}",
     "a\nb"},
    {"a{# c #}b",
     "{}",
     "ab"},
    {"a {#- c -#} b",
     "{}",
     "ab"},
    {"a\n  {# c #}\nb",
     "{}",
     "a\nb"},
    {"{{ 'x' }}\ny",
     "{}",
     "x\ny"},
    {"{% raw %}{{ x }}{% endraw %}",
     "{}",
     "{{ x }}"},
    {"{% for x in [1,2] %}\n  {{ x }}\n{% endfor %}\n",
     "{}",
     "  1\n  2\n"},
    {"  {% for x in [1,2] -%}\n  {{ x }}\n  {%- endfor %}",
     "{}",
     "12"},
    {"{%- for x in [1,2] %}\n    {%- if x == 1 %}\n        {{- 'one' }}\n    {%- else %}\n        {{- 'other' }}\n    {%- endif %}\n{%- endfor %}",
     "{}",
     "oneother"},
    {"x {% if true %} y {% endif %} z",
     "{}",
     "x  y  z"},
    {"\t{% if true %}\n\tq\n\t{% endif %}\n",
     "{}",
     "\tq\n"},
    {"{{ 1 + 2 }}",
     "{}",
     "3"},
    {"{{ 7 / 2 }}",
     "{}",
     "3.5"},
    {"{{ 6 / 2 }}",
     "{}",
     "3.0"},
    {"{{ 7 // 2 }}",
     "{}",
     "3"},
    {"{{ -7 // 2 }}",
     "{}",
     "-4"},
    {"{{ -7 % 3 }}",
     "{}",
     "2"},
    {"{{ 7 % -3 }}",
     "{}",
     "-2"},
    {"{{ 2 ** 10 }}",
     "{}",
     "1024"},
    {"{{ 1.5 + 1 }}",
     "{}",
     "2.5"},
    {"{{ 'a' ~ 1 ~ none }}",
     "{}",
     "a1None"},
    {"{{ 'ab' * 3 }}",
     "{}",
     "ababab"},
    {"{{ [1,2] + [3] }}",
     "{}",
     "[1, 2, 3]"},
    {"{{ {'a': 1, 'b': 'x'} }}",
     "{}",
     "{'a': 1, 'b': 'x'}"},
    {"{{ true }}",
     "{}",
     "True"},
    {"{{ none }}",
     "{}",
     "None"},
    {"{{ 0.1 + 0.2 }}",
     "{}",
     "0.30000000000000004"},
    {"{{ 1e-5 }}",
     "{}",
     "1e-05"},
    {"{{ 1e16 }}",
     "{}",
     "1e+16"},
    {"{{ 1e15 }}",
     "{}",
     "1000000000000000.0"},
    {"{{ 123456789.0 * 10 }}",
     "{}",
     "1234567890.0"},
    {"{{ 1 + 2 * 3 }}",
     "{}",
     "7"},
    {"{{ (1 + 2) * 3 }}",
     "{}",
     "9"},
    {"{{ 2 ~ 3 * 2 }}",
     "{}",
     "26"},
    {"{{ 1 == 1.0 }}",
     "{}",
     "True"},
    {"{{ 'a' < 'b' }}",
     "{}",
     "True"},
    {"{{ 'x' in 'xyz' }}",
     "{}",
     "True"},
    {"{{ 2 not in [1,2] }}",
     "{}",
     "False"},
    {"{{ 'k' in {'k': 1} }}",
     "{}",
     "True"},
    {"{{ 0 or 'x' }}",
     "{}",
     "x"},
    {"{{ 1 and 'y' }}",
     "{}",
     "y"},
    {"{{ not [] }}",
     "{}",
     "True"},
    {"{{ 'y' if 1 else 'n' }}",
     "{}",
     "y"},
    {"{{ 'y' if 0 }}",
     "{}",
     ""},
    {"{{ [1,2,3,4][::-1] }}",
     "{}",
     "[4, 3, 2, 1]"},
    {"{{ 'hello'[1:3] }}",
     "{}",
     "el"},
    {"{{ 'hello'[-1] }}",
     "{}",
     "o"},
    {"{{ [1,2,3][-2:] }}",
     "{}",
     "[2, 3]"},
    {"{{ 'abcdef'[::2] }}",
     "{}",
     "ace"},
    {"{{ 'héllo'[1] }}",
     "{}",
     "é"},
    {"{{ 'héllo'|length }}",
     "{}",
     "5"},
    {"{{ 'héllo'[::-1] }}",
     "{}",
     "olléh"},
    {"{{ [1,2,3][5] }}",
     "{}",
     ""},
    {"{{ [1,2,3][1:100] }}",
     "{}",
     "[2, 3]"},
    {"{{ [1,2,3][-100:1] }}",
     "{}",
     "[1]"},
    {"{{ [1,2,3,4,5][4:1:-2] }}",
     "{}",
     "[5, 3]"},
    {"{{ \"it's\" }}",
     "{}",
     "it's"},
    {"{{ ['a', \"it's\", 'q\"x'] }}",
     "{}",
     "['a', \"it's\", 'q\"x']"},
    {"{{ [1.0, 2.5, none, true] }}",
     "{}",
     "[1.0, 2.5, None, True]"},
    {"{{ 10 / 4 * 2 }}",
     "{}",
     "5.0"},
    {"{{ 3 - -2 }}",
     "{}",
     "5"},
    {"{{ -(2 ** 2) }}",
     "{}",
     "-4"},
    {"{{ 2 ** -1 }}",
     "{}",
     "0.5"},
    {"{{ 1_000 }}",
     "{}",
     "1000"},
    {"{{ 0.5e3 }}",
     "{}",
     "500.0"},
    {"{{ 'a' 'b' }}",
     "{}",
     "ab"},
    {"{{ (1, 2) }}",
     "{}",
     "(1, 2)"},
    {"{{ () }}",
     "{}",
     "()"},
    {"{{ []|length }}",
     "{}",
     "0"},
    {"{{ {}|length }}",
     "{}",
     "0"},
    {"{{ '' or 'e' }}",
     "{}",
     "e"},
    {"{{ 3 > 2 and 2 > 1 }}",
     "{}",
     "True"},
    {"{{ not 1 == 2 }}",
     "{}",
     "True"},
    {"{{ 1 if none is none else 2 }}",
     "{}",
     "1"},
    {"{{ {'a': {'b': [1, {'c': 'd'}]}} }}",
     "{}",
     "{'a': {'b': [1, {'c': 'd'}]}}"},
    {"{{ 'a\\tb\\n' }}",
     "{}",
     "a\tb\n"},
    {"{{ '\\u00e9\\x41' }}",
     "{}",
     "éA"},
    {"{{ true + 1 }}",
     "{}",
     "2"},
    {"{{ 5 // 2.0 }}",
     "{}",
     "2.0"},
    {"{{ -5 % 2.5 }}",
     "{}",
     "0.0"},
    {"{{ 1.0 * 3 }}",
     "{}",
     "3.0"},
    {"{{ 100000000000000000.0 }}",
     "{}",
     "1e+17"},
    {"{{ 0.0001 }}",
     "{}",
     "0.0001"},
    {"{{ 0.00001 }}",
     "{}",
     "1e-05"},
    {"{{ -0.0 }}",
     "{}",
     "-0.0"},
    {"{{ 1/3 }}",
     "{}",
     "0.3333333333333333"},
    {"{{ nope }}",
     "{}",
     ""},
    {"{{ nope is defined }}",
     "{}",
     "False"},
    {"{{ nope is undefined }}",
     "{}",
     "True"},
    {"{{ nope|length }}",
     "{}",
     "0"},
    {"{{ nope|default('d') }}",
     "{}",
     "d"},
    {"{{ nope ~ 'x' }}",
     "{}",
     "x"},
    {"{{ (nope or 'f') }}",
     "{}",
     "f"},
    {"{{ nope is none }}",
     "{}",
     "False"},
    {"{{ nope == nope }}",
     "{}",
     "True"},
    {"{{ 'a' in nope }}",
     "{}",
     "False"},
    {"{{ nope|items|list }}",
     "{}",
     "[]"},
    {"{{ nope|list }}",
     "{}",
     "[]"},
    {"{{ nope|join(',') }}",
     "{}",
     ""},
    {"{{ nope is iterable }}",
     "{}",
     "True"},
    {"{{ nope is sequence }}",
     "{}",
     "True"},
    {"{{ nope is string }}",
     "{}",
     "False"},
    {"{{ nope|string }}",
     "{}",
     ""},
    {"{{ nope|first }}",
     "{}",
     ""},
    {"{{ (none).x is defined }}",
     "{}",
     "False"},
    {"{{ (3).foo is defined }}",
     "{}",
     "False"},
    {"{% for x in nope %}x{% else %}empty{% endfor %}",
     "{}",
     "empty"},
    {"{{ 'a' is string }}",
     "{}",
     "True"},
    {"{{ {} is mapping }}",
     "{}",
     "True"},
    {"{{ [] is mapping }}",
     "{}",
     "False"},
    {"{{ 'abc' is iterable }}",
     "{}",
     "True"},
    {"{{ 1 is iterable }}",
     "{}",
     "False"},
    {"{{ 1 is number }}",
     "{}",
     "True"},
    {"{{ 1.5 is number }}",
     "{}",
     "True"},
    {"{{ true is number }}",
     "{}",
     "True"},
    {"{{ [1] is sequence }}",
     "{}",
     "True"},
    {"{{ 's' is sequence }}",
     "{}",
     "True"},
    {"{{ {} is sequence }}",
     "{}",
     "True"},
    {"{{ none is none }}",
     "{}",
     "True"},
    {"{{ 1 is not none }}",
     "{}",
     "True"},
    {"{{ true is true }}",
     "{}",
     "True"},
    {"{{ 0 is false }}",
     "{}",
     "False"},
    {"{{ false is false }}",
     "{}",
     "True"},
    {"{{ 4 is even }}",
     "{}",
     "True"},
    {"{{ 3 is odd }}",
     "{}",
     "True"},
    {"{{ 9 is divisibleby(3) }}",
     "{}",
     "True"},
    {"{{ 9 is divisibleby 3 }}",
     "{}",
     "True"},
    {"{{ 3 is equalto 3 }}",
     "{}",
     "True"},
    {"{{ 'x' is eq('x') }}",
     "{\"x\": 5}",
     "True"},
    {"{{ 1 is integer }}",
     "{}",
     "True"},
    {"{{ 1.0 is float }}",
     "{}",
     "True"},
    {"{{ true is boolean }}",
     "{}",
     "True"},
    {"{{ 1 is boolean }}",
     "{}",
     "False"},
    {"{{ 'ab' is lower }}",
     "{}",
     "True"},
    {"{{ 'AB' is upper }}",
     "{}",
     "True"},
    {"{{ 2 is in([1,2]) }}",
     "{}",
     "True"},
    {"{{ none is sameas none }}",
     "{}",
     "True"},
    {"{{ 1 is lt 2 }}",
     "{}",
     "True"},
    {"{{ 2 is ge 2 }}",
     "{}",
     "True"},
    {"{{ x is defined and x }}",
     "{\"x\": 5}",
     "5"},
    {"{{ raise_exception is callable }}",
     "{\"x\": 5}",
     "True"},
    {"{{ '  hi  '|trim }}",
     "{}",
     "hi"},
    {"{{ 'xxhixx'|trim('x') }}",
     "{}",
     "hi"},
    {"{{ 'hi'|upper }}",
     "{}",
     "HI"},
    {"{{ 'HI'|lower }}",
     "{}",
     "hi"},
    {"{{ 'hELLO wORLD'|capitalize }}",
     "{}",
     "Hello world"},
    {"{{ 'hello wORLD foo-bar'|title }}",
     "{}",
     "Hello World Foo-Bar"},
    {"{{ [1,2,3]|join(', ') }}",
     "{}",
     "1, 2, 3"},
    {"{{ 'abc'|join('-') }}",
     "{}",
     "a-b-c"},
    {"{{ [1,2,3]|first }}",
     "{}",
     "1"},
    {"{{ [1,2,3]|last }}",
     "{}",
     "3"},
    {"{{ 'abc'|first }}",
     "{}",
     "a"},
    {"{{ 123|string }}",
     "{}",
     "123"},
    {"{{ none|string }}",
     "{}",
     "None"},
    {"{{ {'a': 1}|items|list }}",
     "{}",
     "[('a', 1)]"},
    {"{{ {'a': 1, 'b': 2}|list }}",
     "{}",
     "['a', 'b']"},
    {"{{ 'ab'|list }}",
     "{}",
     "['a', 'b']"},
    {"{{ [1,2]|length }}",
     "{}",
     "2"},
    {"{{ 'abc'|count }}",
     "{}",
     "3"},
    {"{{ {'a': 1}|length }}",
     "{}",
     "1"},
    {"{{ ''|default('d') }}",
     "{}",
     ""},
    {"{{ ''|default('d', true) }}",
     "{}",
     "d"},
    {"{{ 0|d('z', true) }}",
     "{}",
     "z"},
    {"{{ none|default('d') }}",
     "{}",
     "None"},
    {"{{ 'aXbX'|replace('X', 'y') }}",
     "{}",
     "ayby"},
    {"{{ 'aXbX'|replace('X', 'y', 1) }}",
     "{}",
     "aybX"},
    {"{{ '42'|int }}",
     "{}",
     "42"},
    {"{{ '4.7'|int }}",
     "{}",
     "4"},
    {"{{ 'x'|int }}",
     "{}",
     "0"},
    {"{{ 'x'|int(7) }}",
     "{}",
     "7"},
    {"{{ 3.9|int }}",
     "{}",
     "3"},
    {"{{ '2.5'|float }}",
     "{}",
     "2.5"},
    {"{{ -3|abs }}",
     "{}",
     "3"},
    {"{{ 2.5|round }}",
     "{}",
     "2.0"},
    {"{{ 3.5|round }}",
     "{}",
     "4.0"},
    {"{{ 2.567|round(2) }}",
     "{}",
     "2.57"},
    {"{{ 2.1|round(0, 'ceil') }}",
     "{}",
     "3.0"},
    {"{{ [3,1,2]|sort }}",
     "{}",
     "[1, 2, 3]"},
    {"{{ [3,1,2]|sort(reverse=true) }}",
     "{}",
     "[3, 2, 1]"},
    {"{{ ['b','A','c']|sort }}",
     "{}",
     "['A', 'b', 'c']"},
    {"{{ {'b': 1, 'a': 2, 'C': 0}|dictsort }}",
     "{}",
     "[('a', 2), ('b', 1), ('C', 0)]"},
    {"{{ {'b': 1, 'a': 2, 'C': 0}|dictsort(true) }}",
     "{}",
     "[('C', 0), ('a', 2), ('b', 1)]"},
    {"{{ {'b': 1, 'a': 2, 'C': 0}|dictsort(by='value', reverse=true) }}",
     "{}",
     "[('a', 2), ('b', 1), ('C', 0)]"},
    {"{% for k, v in {'y': 1, 'X': 2}|dictsort %}{{ k }}={{ v }};{% endfor %}",
     "{}",
     "X=2;y=1;"},
    {"{{ [1,2,1,3]|unique|list }}",
     "{}",
     "[1, 2, 3]"},
    {"{{ [1,2,3]|reverse|list }}",
     "{}",
     "[3, 2, 1]"},
    {"{{ 'abc'|reverse }}",
     "{}",
     "cba"},
    {"{{ [4,2,8]|min }}",
     "{}",
     "2"},
    {"{{ [4,2,8]|max }}",
     "{}",
     "8"},
    {"{{ [1,2,3]|sum }}",
     "{}",
     "6"},
    {"{{ [{'a': 1}, {'a': 2}]|map(attribute='a')|list }}",
     "{}",
     "[1, 2]"},
    {"{{ ['a','b']|map('upper')|list }}",
     "{}",
     "['A', 'B']"},
    {"{{ [1,2,3,4]|select('even')|list }}",
     "{}",
     "[2, 4]"},
    {"{{ [1,2,3,4]|reject('even')|list }}",
     "{}",
     "[1, 3]"},
    {"{{ [1, 0, 2]|select|list }}",
     "{}",
     "[1, 2]"},
    {"{{ [{'r':'u'},{'r':'a'},{'r':'u'}]|selectattr('r', 'equalto', 'u')|list|length }}",
     "{}",
     "2"},
    {"{{ [{'r':'u'},{'r':'a'}]|rejectattr('r', 'equalto', 'u')|list }}",
     "{}",
     "[{'r': 'a'}]"},
    {"{{ [{'t': 1}, {'x': 2}]|selectattr('t', 'defined')|list }}",
     "{}",
     "[{'t': 1}]"},
    {"{{ [{'t': 1}, {'t': 0}]|selectattr('t')|list }}",
     "{}",
     "[{'t': 1}]"},
    {"{{ 'a\\nb\\nc'|indent(2) }}",
     "{}",
     "a\n  b\n  c"},
    {"{{ 'a\\n\\nb'|indent(2, true) }}",
     "{}",
     "  a\n\n  b"},
    {"{{ 'a\\nb'|indent(2, first=true) }}",
     "{}",
     "  a\n  b"},
    {"{{ {'b': 1, 'a': [1, 2, {'z': none, 'y': true}], 'c': 'é\"\\\\\\n\\u0001'}|tojson }}",
     "{}",
     "{\"b\": 1, \"a\": [1, 2, {\"z\": null, \"y\": true}], \"c\": \"é\\\"\\\\\\n\\u0001\"}"},
    {"{{ {'b': 1, 'a': [1, 2, {}], 'c': []}|tojson(indent=2) }}",
     "{}",
     "{\n  \"b\": 1,\n  \"a\": [\n    1,\n    2,\n    {}\n  ],\n  \"c\": []\n}"},
    {"{{ {'b': 1, 'a': 2}|tojson(sort_keys=true) }}",
     "{}",
     "{\"a\": 2, \"b\": 1}"},
    {"{{ 1.0|tojson }}",
     "{}",
     "1.0"},
    {"{{ 'x'|tojson }}",
     "{}",
     "\"x\""},
    {"{{ [1, 2.5, 'a']|tojson }}",
     "{}",
     "[1, 2.5, \"a\"]"},
    {"{{ '<a>'|e }}",
     "{}",
     "&lt;a&gt;"},
    {"{{ 'a b  c'|wordcount }}",
     "{}",
     "3"},
    {"{{ {'a': 1}|attr('a') }}",
     "{}",
     ""},
    {"{{ tools|tojson }}",
     "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get\", \"description\": \"Get it\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}, \"required\": [\"q\"]}}}]}",
     "[{\"type\": \"function\", \"function\": {\"name\": \"get\", \"description\": \"Get it\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}, \"required\": [\"q\"]}}}]"},
    {"{{ tools|tojson(indent=4) }}",
     "{\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get\", \"description\": \"Get it\", \"parameters\": {\"type\": \"object\", \"properties\": {\"q\": {\"type\": \"string\"}}, \"required\": [\"q\"]}}}]}",
     "[\n    {\n        \"type\": \"function\",\n        \"function\": {\n            \"name\": \"get\",\n            \"description\": \"Get it\",\n            \"parameters\": {\n                \"type\": \"object\",\n                \"properties\": {\n                    \"q\": {\n                        \"type\": \"string\"\n                    }\n                },\n                \"required\": [\n                    \"q\"\n                ]\n            }\n        }\n    }\n]"},
    {"{{ [1,2,3]|join }}",
     "{}",
     "123"},
    {"{{ [[1,2],[3]]|map('length')|list }}",
     "{}",
     "[2, 1]"},
    {"{{ ['a','b']|map('replace', 'a', 'z')|list }}",
     "{}",
     "['z', 'b']"},
    {"{{ [{'a': {'b': 5}}]|map(attribute='a.b')|list }}",
     "{}",
     "[5]"},
    {"{{ '%s'|length }}",
     "{}",
     "2"},
    {"{{ [{'n': 'b'}, {'n': 'a'}]|sort(attribute='n')|map(attribute='n')|join }}",
     "{}",
     "ab"},
    {"{{ [1, 'a']|tojson }}",
     "{}",
     "[1, \"a\"]"},
    {"{{ {'x': 1e20, 'y': 1.5e-7, 'z': -0.0}|tojson }}",
     "{}",
     "{\"x\": 1e+20, \"y\": 1.5e-07, \"z\": -0.0}"},
    {"{{ 'abc'.startswith('a') }}",
     "{}",
     "True"},
    {"{{ 'abc'.startswith(('x', 'a')) }}",
     "{}",
     "True"},
    {"{{ 'abc'.endswith('bc') }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "True"},
    {"{{ ' a  b '.split() }}",
     "{}",
     "['a', 'b']"},
    {"{{ 'a,b,,c'.split(',') }}",
     "{}",
     "['a', 'b', '', 'c']"},
    {"{{ 'a,b,c'.split(',', 1) }}",
     "{}",
     "['a', 'b,c']"},
    {"{{ 'a,b,c'.rsplit(',', 1) }}",
     "{}",
     "['a,b', 'c']"},
    {"{{ '  x  '.strip() }}",
     "{}",
     "x"},
    {"{{ 'xxaxx'.strip('x') }}",
     "{}",
     "a"},
    {"{{ '\\n\\nx\\n'.lstrip('\\n') }}",
     "{}",
     "x\n"},
    {"{{ 'x\\n\\n'.rstrip() }}",
     "{}",
     "x"},
    {"{{ 'aaa'.replace('a', 'b', 2) }}",
     "{}",
     "bba"},
    {"{{ 'Ab'.upper() }}",
     "{}",
     "AB"},
    {"{{ 'Ab'.lower() }}",
     "{}",
     "ab"},
    {"{{ 'abc'.find('c') }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "2"},
    {"{{ 'abc'.find('z') }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "-1"},
    {"{{ 'a-b-c'.count('-') }}",
     "{}",
     "2"},
    {"{{ '-'.join(['a','b']) }}",
     "{}",
     "a-b"},
    {"{{ '12'.isdigit() }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "True"},
    {"{{ 'ab'.isalpha() }}",
     "{}",
     "True"},
    {"{{ 'hello world'.title() }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "Hello World"},
    {"{{ 'x'.capitalize() }}",
     "{}",
     "X"},
    {"{{ d.get('a') }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "1"},
    {"{{ d.get('z') }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "None"},
    {"{{ d.get('z', 5) }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "5"},
    {"{{ d.items()|list }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "[('a', 1), ('b', [2, 3])]"},
    {"{{ d.keys()|list }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "['a', 'b']"},
    {"{{ d.values()|list }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "[1, [2, 3]]"},
    {"{{ d['a'] }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "1"},
    {"{{ d.a }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "1"},
    {"{{ d.items is defined }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "True"},
    {"{{ 'a</think>b'.split('</think>')[-1] }}",
     "{}",
     "b"},
    {"{{ '<think>\\nr\\n</think>\\n\\nc'.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') }}",
     "{}",
     "r"},
    {"{{ '  é  '.strip() }}",
     "{}",
     "é"},
    {"{{ 'ÉCOLE'.lower() }}",
     "{}",
     "école"},
    {"{{ 'a'.zzz is defined }}",
     "{\"d\": {\"a\": 1, \"b\": [2, 3]}}",
     "False"},
    {"{% for x in [5,6,7] %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
     "{}",
     "01TrueFalse332;12FalseFalse321;23FalseTrue310;"},
    {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}",
     "{\"d\": {\"z\": 1, \"a\": 2}}",
     "z=1;a=2;"},
    {"{% for k in d %}{{ k }};{% endfor %}",
     "{\"d\": {\"z\": 1, \"a\": 2}}",
     "z;a;"},
    {"{% for x in [1,2,3,4] if x > 1 %}{{ x }}/{{ loop.length }}/{{ loop.index }};{% endfor %}",
     "{}",
     "2/3/1;3/3/2;4/3/3;"},
    {"{% for x in [] %}a{% else %}b{% endfor %}",
     "{}",
     "b"},
    {"{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}",
     "{}",
     "13"},
    {"{% for x in [1,2] %}{% for y in 'ab' %}{{ x }}{{ y }}{{ loop.index }} {% endfor %}{{ loop.index }}|{% endfor %}",
     "{}",
     "1a1 1b2 1|2a1 2b2 2|"},
    {"{% for x in [1,2] %}{% endfor %}{{ x }}|{{ loop is defined }}",
     "{}",
     "|False"},
    {"{% set y = 1 %}{% for x in [1,2] %}{% set y = x * 10 %}{{ y }};{% endfor %}{{ y }}",
     "{}",
     "10;20;1"},
    {"{% set ns = namespace(y=1) %}{% for x in [1,2] %}{% set ns.y = ns.y + x %}{% endfor %}{{ ns.y }}",
     "{}",
     "4"},
    {"{% set ns = namespace() %}{% set ns.a = 'q' %}{{ ns.a }}{{ ns.b is defined }}",
     "{}",
     "qFalse"},
    {"{% set a, b = 1, 2 %}{{ a }}{{ b }}",
     "{}",
     "12"},
    {"{% set a = [1, 2] %}{% set a = a + [3] %}{{ a }}",
     "{}",
     "[1, 2, 3]"},
    {"{% set t %}in{{ 1 + 1 }}side{% endset %}[{{ t }}]",
     "{}",
     "[in2side]"},
    {"{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }},{% endfor %}",
     "{}",
     "3,7,"},
    {"{% for x in 'hé' %}{{ x }}.{% endfor %}",
     "{}",
     "h.é."},
    {"{% for x in range(3) %}{{ x }}{% endfor %}{{ range(1, 10, 3)|list }}{{ range(5, 0, -2)|list }}",
     "{}",
     "012[1, 4, 7][5, 3, 1]"},
    {"{% for i in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }}-{{ loop.cycle('a', 'b') }};{% endfor %}",
     "{}",
     "-2-a;1-3-b;2--a;"},
    {"{% macro greet(name, greeting='Hi') %}{{ greeting }} {{ name }}{% endmacro %}{{ greet('Bob') }}|{{ greet('Al', greeting='Yo') }}|{{ greet() }}",
     "{}",
     "Hi Bob|Yo Al|Hi "},
    {"{% macro f(x) %}[{{ x }}{% if x > 0 %}{{ f(x - 1) }}{% endif %}]{% endmacro %}{{ f(3) }}",
     "{}",
     "[3[2[1[0]]]]"},
    {"{% if a %}A{% elif b %}B{% elif c %}C{% else %}D{% endif %}",
     "{\"a\": 0, \"b\": 0, \"c\": 1}",
     "C"},
    {"{% if messages[0]['role'] == messages[0].role %}same{% endif %}",
     "{\"messages\": [{\"role\": \"user\"}]}",
     "same"},
    {"{{ messages[1:]|length }}{{ (messages|last).content }}",
     "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": \"u\"}]}",
     "1u"},
    {"{{ m == m2 }}{{ m == m3 }}",
     "{\"m\": {\"a\": 1, \"b\": 2}, \"m2\": {\"b\": 2, \"a\": 1}, \"m3\": {\"a\": 1}}",
     "TrueFalse"},
    {"{{ x }}|{{ y }}|{{ z }}|{{ w }}",
     "{\"x\": 1.0, \"y\": 2, \"z\": true, \"w\": null}",
     "1.0|2|True|None"},
    {"{{ [x, y, z, w] }}",
     "{\"x\": 1.0, \"y\": \"s\", \"z\": true, \"w\": null}",
     "[1.0, 's', True, None]"},
    {"{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}",
     "{}",
     "2"},
    {"{{ 'a' if x is defined else 'b' }}",
     "{}",
     "b"},
    {"{{ x|default(3) + 1 }}",
     "{}",
     "4"},
    {"{{ -1|abs }}",
     "{}",
     "1"},
    {"{{ not true == false }}",
     "{}",
     "True"},
    {"{{ 1 in [1.0] }}{{ true in [1] }}",
     "{}",
     "TrueTrue"},
    {"{{ '%d'|length }}",
     "{}",
     "2"},
    {"{{ 2 ** -1 }}|{{ 2 ** -2 }}|{{ 4 ** 0.5 }}|{{ (-8.0) ** 3 }}|{{ 0 ** 0 }}|{{ 0.0 ** 0 }}",
     "{}",
     "0.5|0.25|2.0|-512.0|1|1.0"},
    {"{{ (1e308 * 10 - 1e308 * 10)|int(7) }}|{{ '1e400'|int(3) }}|{{ 'inf'|int(4) }}|{{ 3.9|int }}|{{ '-3.9'|int }}",
     "{}",
     "7|3|4|3|-3"},
    {"{{ 'a\\nb'|indent(3, true) }}|{{ 'a\\nb'|indent(-3) }}|{{ 'a\\nb'|indent(100)|length }}",
     "{}",
     "   a\n   b|a\nb|103"},
    {"{{ [1]|tojson(indent=100)|length }}|{{ [1]|tojson(indent=-2) }}|{{ [[1,2],{'a':[]}]|tojson(indent=0) }}",
     "{}",
     "105|[\n1\n]|[\n[\n1,\n2\n],\n{\n\"a\": []\n}\n]"},
    {"{% for m in messages %}{{ m.role }}:{{ m['content'] }}{{ '\\n' if not loop.last }}{% endfor %}",
     "{\"messages\": [{\"role\": \"a\", \"content\": \"x\"}, {\"role\": \"b\", \"content\": \"y\"}]}",
     "a:x\nb:y"},
};

// Templates Jinja2 rejects at render time; so must we.
const ErrorCase kErrorCases[] = {
    {"{{ nope + 1 }}", "{}"},
    {"{{ nope.x + 1 }}", "{}"},
    {"{{ nope() }}", "{}"},
    {"{{ nope[1:2] }}", "{}"},
    {"{{ raise_exception('boom') }}", "{}"},
    {"{{ 1 / 0 }}", "{}"},
    {"{{ 'a' + 1 }}", "{}"},
    {"{{ 1 + 'a' }}", "{}"},
    {"{{ [1] < 'a' }}", "{}"},
    // Python's float power raises where C gives inf or nan (ZeroDivisionError, a complex result,
    // OverflowError), and int() of an infinity is an OverflowError that Jinja2's int filter does
    // not catch.
    {"{{ 0 ** -1 }}", "{}"},
    {"{{ 0.0 ** -1 }}", "{}"},
    {"{{ 0 ** -1.5 }}", "{}"},
    {"{{ (-8) ** 0.5 }}", "{}"},
    {"{{ 10.0 ** 400 }}", "{}"},
    {"{{ 1.5 ** 5000 }}", "{}"},
    {"{{ (1e308 * 10)|int }}", "{}"},
    {"{{ (1e308 * 10)|int(5) }}", "{}"},
    {"{{ (0 - 1e308 * 10)|int }}", "{}"},
    // Jinja2 runs out of memory building " " * width.
    {"{{ 'x'|indent(1000000000000) }}", "{}"},
    {"{{ {'a': 1}|dictsort(by='x') }}", "{}"},
    {"{{ [1]|dictsort }}", "{}"},
};

TEST(JinjaRender, MatchesPythonJinja2OnEveryConstruct) {
  for (const auto& c : kCases) {
    std::string got;
    try {
      got = render_str(c.tmpl, c.ctx);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "template " << c.tmpl << " threw: " << e.what();
      continue;
    }
    EXPECT_EQ(got, c.expected) << "template: " << c.tmpl << "\ncontext: " << c.ctx;
  }
}

TEST(JinjaRender, FailsWherePythonJinja2Fails) {
  for (const auto& c : kErrorCases)
    EXPECT_THROW(render_str(c.tmpl, c.ctx), TemplateError) << "template: " << c.tmpl;
}

// Documented leniency (as asked of fp4lm): attribute or item access on an undefined value gives
// undefined instead of raising, so optional message fields chain safely.
TEST(JinjaRender, UndefinedIsChainable) {
  EXPECT_EQ(render_str("[{{ nope.attr.deeper }}]"), "[]");
  EXPECT_EQ(render_str("[{{ nope['a'] }}]"), "[]");
  EXPECT_EQ(render_str("{{ d.a.b.c is defined }}", R"({"d": {"a": 5}})"), "False");
  EXPECT_EQ(render_str("{{ m.tool_calls is defined }}|{{ m.tool_calls|length }}", R"({"m": {"role": "user"}})"),
            "False|0");
}

TEST(JinjaRender, UndefinedInArithmeticNamesTheVariable) {
  try {
    render_str("{{ missing + 1 }}");
    FAIL() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'missing' is undefined"));
  }
}

TEST(JinjaRender, MessagesRoleByAttributeAndByItem) {
  const char* ctx = R"({"messages": [{"role": "user", "content": "hi"}]})";
  EXPECT_EQ(render_str("{{ messages[0]['role'] }}/{{ messages[0].role }}/{{ messages[0].get('role') }}", ctx),
            "user/user/user");
}

TEST(JinjaRender, ForLoopScopeDoesNotLeakButNamespaceDoes) {
  EXPECT_EQ(render_str("{% set y = 1 %}{% for x in [1,2] %}{% set y = x * 10 %}{% endfor %}{{ y }}"), "1");
  EXPECT_EQ(render_str("{% set ns = namespace(y=1) %}{% for x in [1,2] %}{% set ns.y = ns.y + x %}{% endfor %}{{ ns.y }}"),
            "4");
  // `if` blocks do not open a scope.
  EXPECT_EQ(render_str("{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}"), "2");
}

TEST(JinjaRender, SetAttributeOnNonNamespaceFails) {
  EXPECT_THROW(render_str("{% set d = {} %}{% set d.x = 1 %}"), TemplateError);
  EXPECT_THROW(render_str("{% set missing.x = 1 %}"), TemplateError);
}

TEST(JinjaRender, NamespaceCannotHoldANamespace) {
  // would make a reference cycle
  EXPECT_THROW(render_str("{% set ns = namespace() %}{% set ns.me = [ns] %}"), TemplateError);
}

TEST(JinjaRender, ContextShadowsGlobals) {
  EXPECT_EQ(render_str("{{ range }}", R"({"range": "mine"})"), "mine");
  EXPECT_EQ(render_str("{{ range(2)|list }}"), "[0, 1]");
}

TEST(JinjaRender, RaiseExceptionCarriesMessageAndPosition) {
  try {
    render_str("line one\n  {{ raise_exception('Roles must alternate') }}");
    FAIL() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.message(), "Roles must alternate");
    EXPECT_EQ(e.pos().line, 2);
    EXPECT_THAT(e.what(), HasSubstr("line 2"));
  }
}

TEST(JinjaRender, RuntimeErrorsCarryLineAndColumn) {
  try {
    render_str("\n\n{{ 1 / 0 }}");
    FAIL() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.pos().line, 3);
    EXPECT_EQ(e.pos().column, 6);
    EXPECT_THAT(e.what(), HasSubstr("division by zero"));
  }
  try {
    render_str("{% for x in 5 %}{% endfor %}");
    FAIL() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.pos().line, 1);
    EXPECT_EQ(e.pos().column, 13);
    EXPECT_THAT(e.what(), HasSubstr("not iterable"));
  }
}

TEST(JinjaRender, MacrosWithDefaultsKeywordsAndRecursion) {
  EXPECT_EQ(render_str("{% macro g(n, p='Hi') %}{{ p }} {{ n }}{% endmacro %}{{ g('Bob') }}|{{ g('Al', p='Yo') }}"),
            "Hi Bob|Yo Al");
  EXPECT_THROW(render_str("{% macro g(n) %}{% endmacro %}{{ g(1, 2) }}"), TemplateError);
  EXPECT_THROW(render_str("{% macro g(n) %}{% endmacro %}{{ g(m=1) }}"), TemplateError);
  // Unbounded recursion hits the call-depth limit, not the stack.
  EXPECT_THROW(render_str("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}"), TemplateError);
}

TEST(JinjaRender, GenerationBlockRendersItsBody) {
  EXPECT_EQ(render_str("a{% generation %}b{% endgeneration %}c"), "abc");
}

TEST(JinjaRender, StepLimitStopsRunawayLoops) {
  RenderLimits limits;
  limits.max_steps = 10'000;
  EXPECT_THROW(render_str("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "{}", limits),
               TemplateError);
}

TEST(JinjaRender, OutputLimitStopsHugeOutput) {
  RenderLimits limits;
  limits.max_output_bytes = 1000;
  EXPECT_THROW(render_str("{% for i in range(100) %}{{ 'xxxxxxxxxxxxxxxxxxxx' }}{% endfor %}", "{}", limits),
               TemplateError);
  EXPECT_EQ(render_str("{% for i in range(10) %}x{% endfor %}", "{}", limits), "xxxxxxxxxx");
}

TEST(JinjaRender, HugeStringsAndRangesAreRefused) {
  EXPECT_THROW(render_str("{{ 'x' * 1000000000 }}"), TemplateError);
  EXPECT_THROW(render_str("{{ range(100000000)|length }}"), TemplateError);
  EXPECT_THROW(render_str("{{ 9223372036854775807 + 1 }}"), TemplateError);
  EXPECT_THROW(render_str("{{ -9223372036854775807 - 2 }}"), TemplateError);
}

// Python gives a bigger integer; ours are 64-bit, so these are errors rather than wrong numbers.
TEST(JinjaRender, IntBeyond64BitsIsAnErrorNotAWrongNumber) {
  for (const char* t : {"{{ 1e300|int }}", "{{ '1e300'|int }}", "{{ '99999999999999999999'|int }}", "{{ 1e19|int }}"}) {
    try {
      render_str(t);
      ADD_FAILURE() << t << " rendered";
    } catch (const TemplateError& e) {
      EXPECT_THAT(e.message(), HasSubstr("does not fit in a 64-bit integer")) << t;
    }
  }
  EXPECT_EQ(render_str("{{ 9.2e18|int }}|{{ -9.2e18|int }}"), "9200000000000000000|-9200000000000000000");
}

// Memory is metered on every operation that builds a value (kMaxValueBytes), so doubling a
// string or a list, repeating one, or serializing a list that shares its parts exponentially
// fails with a TemplateError instead of exhausting memory.
TEST(JinjaRender, EveryValueBuiltIsMetered) {
  auto expect_too_big = [](const std::string& t) {
    try {
      render_str(t);
      ADD_FAILURE() << t << " rendered";
    } catch (const TemplateError& e) {
      EXPECT_THAT(e.message(), HasSubstr("larger than")) << t;
    }
  };
  expect_too_big("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                 "{% endfor %}");
  expect_too_big("{% set ns = namespace(s=[1]) %}{% for i in range(40) %}{% set ns.s = [ns.s] ~ [ns.s] %}{% endfor %}");
  expect_too_big("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}");
  expect_too_big("{% set ns = namespace(l=['" + std::string(1000, 'x') + "']) %}{% for i in range(40) %}"
                 "{% set ns.l = ns.l + ns.l %}{% endfor %}");
  // A list of a few shared lists stands for 8^10 items when written out.
  std::string shared = "{% set ns = namespace(l=[1, 2, 3, 4, 5, 6, 7, 8]) %}{% for i in range(10) %}"
                       "{% set ns.l = [ns.l, ns.l, ns.l, ns.l, ns.l, ns.l, ns.l, ns.l] %}{% endfor %}";
  expect_too_big(shared + "{{ ns.l|tojson }}");
  expect_too_big(shared + "{{ ns.l|length }}");
  expect_too_big("{{ ['" + std::string(1000, 'x') + "'] * 100000 }}");
  expect_too_big("{% set s = 'x' * 10000000 %}{% for c in s %}{% endfor %}");
  expect_too_big("{% set s = 'x' * 10000 %}{{ s.replace('', s) }}");
  expect_too_big("{% set s = 'x' * 10000000 %}{{ s.join(['a'] * 100) }}");
  expect_too_big("{% set ns = namespace(s='x' * 40000000) %}{{ [ns, ns] }}");
  expect_too_big("{{ [1]|tojson(indent=100000000) }}");
  // Ordinary work stays well inside: a megabyte of text, lists of a few hundred thousand items.
  EXPECT_EQ(render_str("{% set s = 'x' * 1000000 %}{{ (s ~ s)|length }}"), "2000000");
  EXPECT_EQ(render_str("{{ (range(100000)|list + range(100000)|list)|length }}"), "200000");
  EXPECT_EQ(render_str("{% set a = [1, 2] %}{{ [a, a, a]|tojson }}"), "[[1, 2], [1, 2], [1, 2]]");
}

TEST(JinjaRender, DeeplyNestedValuesAreRefused) {
  EXPECT_THROW(render_str("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}"),
               TemplateError);
  // JSON input nested too deeply is refused while converting it.
  std::string deep = std::string(400, '[') + std::string(400, ']');
  EXPECT_THROW(Value::from_json(nlohmann::json::parse(deep)), ValueError);
}

TEST(JinjaRender, StrftimeNowFormatsTheCurrentTime) {
  EXPECT_EQ(render_str("{{ strftime_now('%Y')|length }}"), "4");
}

}  // namespace
}  // namespace fp4lm::tokenizer::jinja::jinja_render_test
