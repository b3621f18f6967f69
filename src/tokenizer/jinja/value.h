#pragma once
// The values a Jinja template computes with, modelled on the Python objects Jinja2 sees when
// Hugging Face renders a chat template: undefined, None, bool, int, float, str, list, dict
// (insertion-ordered, like Python's), namespace, and callables (globals, bound methods).
// Lists and dicts are immutable once built (the HF sandbox forbids mutation); only a namespace
// changes, through `{% set ns.x = ... %}`.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"

namespace fp4lm::tokenizer::jinja {

// A position in the template source, 1-based.
struct Pos {
  int line = 0;
  int column = 0;
};

// A failure raised by a value operation before it knows where in the template it happened; the
// interpreter catches it and rethrows it as a TemplateError carrying the position.
class ValueError : public fp4lm::Error {
 public:
  explicit ValueError(const std::string& what) : fp4lm::Error(what) {}
};

template <typename... Args>
[[noreturn]] void value_fail(fmt::format_string<Args...> f, Args&&... args) {
  throw ValueError(fmt::format(f, std::forward<Args>(args)...));
}

// Any template failure (syntax, runtime, raise_exception), with its place in the source.
// what() reads "line L, column C: message".
class TemplateError : public fp4lm::Error {
 public:
  TemplateError(Pos pos, const std::string& message);
  Pos pos() const { return pos_; }
  const std::string& message() const { return message_; }

 private:
  Pos pos_;
  std::string message_;
};

class Value;
struct ListObj;
struct DictObj;
struct CallArgs;

using Function = std::function<Value(const CallArgs&)>;

struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};

// Containers deeper than this are refused, so that printing, comparing and freeing them can
// recurse without exhausting the stack.
inline constexpr int kMaxNesting = 256;

// The most memory one value may stand for (its footprint): the bytes of its strings plus
// kItemBytes per scalar, string or container, counting a shared list or dict every time it
// appears, because printing or serializing it writes it out that many times. Every operation
// that builds a value checks this before building it, so no template can reach memory beyond a
// small multiple of it (strings, lists built by +, * or filters, tojson of shared nested lists).
inline constexpr size_t kMaxValueBytes = size_t{64} << 20;
inline constexpr size_t kItemBytes = 16;

// a + b, saturating at SIZE_MAX.
inline size_t add_bytes(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }
// ValueError "<what> larger than 64 MiB" when `bytes` exceeds kMaxValueBytes.
void check_value_bytes(size_t bytes, const char* what);

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string,
                               std::shared_ptr<const ListObj>, std::shared_ptr<DictObj>,
                               std::shared_ptr<const Function>>;

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<int64_t>(i)) {}
  Value(int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);  // a list that prints as (a, b) and != a list
  static Value dict(std::vector<std::pair<std::string, Value>> items);  // keys must be unique
  static Value make_namespace(std::vector<std::pair<std::string, Value>> items);
  static Value function(Function f);
  template <typename Json>
  static Value from_json(const Json& j, int depth = 0);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<const ListObj>>(v_); }  // or tuple
  bool is_tuple() const;
  bool is_dict() const;       // a mapping (not a namespace)
  bool is_namespace() const;
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<const Function>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const std::vector<Value>& as_list() const;
  const DictObj& as_dict() const;  // dict or namespace
  DictObj& as_namespace() const;
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }

  // A number as double (bool counts as 0/1, as in Python).
  double to_double() const;
  // Nesting depth of a container (0 for scalars).
  int depth() const;
  // What this value stands for in memory (see kMaxValueBytes); a namespace counts kItemBytes
  // (it is shared by reference and cannot be copied into a string but by printing, which is
  // bounded as it goes).
  size_t footprint() const;

  // Python truthiness.
  bool truthy() const;
  // Python str(): what `{{ x }}` prints. Undefined prints as empty.
  std::string str() const;
  // Python repr(): how a value looks inside a printed list or dict.
  std::string repr() const;
  // Python json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=False), as HF's tojson.
  // indent < 0 means none (separators ", " and ": "); otherwise newlines and "," separators.
  std::string to_json(int indent = -1) const;
  // The Python type name, for error messages ("str", "int", "list", "dict", ...).
  std::string type_name() const;

  // Python ==.
  friend bool operator==(const Value& a, const Value& b);

 private:
  explicit Value(Storage s) : v_(std::move(s)) {}
  Storage v_;
};

struct ListObj {
  std::vector<Value> items;
  int depth = 1;
  size_t bytes = kItemBytes;
  bool is_tuple = false;
};

struct DictObj {
  std::vector<std::pair<std::string, Value>> items;  // insertion order, keys unique
  bool is_namespace = false;
  int depth = 1;
  size_t bytes = kItemBytes;

  const Value* find(const std::string& key) const;
  // Inserts or replaces (keeps the original position on replace).
  void set(const std::string& key, Value v);
};

// Arguments of a call: positional, then keyword.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // The argument at `index` or named `name`, or Undefined when neither was given.
  Value get(size_t index, const std::string& name) const;
  const Value* keyword_arg(const std::string& name) const;
};

// Python-like string helpers on UTF-8 text (indexes count code points).
size_t utf8_length(const std::string& s);
std::vector<std::string> utf8_chars(const std::string& s);
bool is_ascii(const std::string& s);

// Python's repr of a float (shortest round trip, "1.0", "1e-05", "inf").
std::string float_repr(double d);

template <typename Json>
Value Value::from_json(const Json& j, int depth) {
  if (depth > kMaxNesting) value_fail("JSON input nested deeper than {} levels", kMaxNesting);
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Value(None{});
    case nlohmann::json::value_t::boolean:
      return Value(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value(j.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      uint64_t u = j.template get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value(j.template get<double>());
    case nlohmann::json::value_t::string:
      return Value(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      std::vector<std::pair<std::string, Value>> items;
      items.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it)
        items.emplace_back(it.key(), from_json(it.value(), depth + 1));
      return dict(std::move(items));
    }
    default:
      value_fail("unsupported JSON value (binary or discarded)");
  }
}

}  // namespace fp4lm::tokenizer::jinja
