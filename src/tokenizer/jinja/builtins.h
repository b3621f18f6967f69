#pragma once
// The operations of the Jinja subset, with Python/Jinja2 semantics: operators, attribute and
// item access (with the methods of str and dict), slicing, iteration, filters, tests and the
// global functions (range, namespace, dict, raise_exception, strftime_now).
// Failures throw ValueError; the interpreter adds the template position.
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace fp4lm::tokenizer::jinja {

// Upper bounds that keep a hostile template from exhausting memory.
inline constexpr size_t kMaxStringBytes = kMaxValueBytes;
inline constexpr size_t kMaxRangeLength = 1'000'000;

// Binary operators: + - * / // % ** ~ == != < <= > >= in "not in".
Value binary_op(const std::string& op, const Value& a, const Value& b);
// Unary operators: - + not.
Value unary_op(const std::string& op, const Value& a);

// obj.name: a dict key, a namespace attribute, or a bound method of str/dict; else undefined.
Value get_attr(const Value& obj, const std::string& name);
// obj[key]: list/str index (negative from the end), dict key; falls back to get_attr for
// string keys (as Jinja does); missing -> undefined.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] on a list or a string (any of the three may be undefined = omitted).
Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step);
// The items a for loop walks: list elements, dict keys, string characters; undefined -> none.
std::vector<Value> iterate(const Value& v);

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(const std::string& name, const Value& v, const CallArgs& args);
bool apply_test(const std::string& name, const Value& v, const CallArgs& args);

// The functions every template sees (the context may shadow them).
std::vector<std::pair<std::string, Value>> global_functions();

}  // namespace fp4lm::tokenizer::jinja
