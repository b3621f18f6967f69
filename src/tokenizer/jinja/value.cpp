#include "tokenizer/jinja/value.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "io/json_file.h"

namespace fp4lm::tokenizer::jinja {

TemplateError::TemplateError(Pos pos, const std::string& message)
    : fp4lm::Error(fmt::format("line {}, column {}: {}", pos.line, pos.column, message)),
      pos_(pos),
      message_(message) {}

namespace {

int child_depth(const Value& v) { return v.depth(); }

void check_depth(int depth) {
  if (depth > kMaxNesting) value_fail("value nested deeper than {} levels", kMaxNesting);
}

// For text built piece by piece (repr, json): fails as soon as it outgrows the limit.
void check_text(const std::string& out, const char* what) { check_value_bytes(out.size(), what); }

std::string repr_string(const std::string& s) {
  char quote = '\'';
  if (s.find('\'') != std::string::npos && s.find('"') == std::string::npos) quote = '"';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(quote)) out += std::string("\\") + quote;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  out += quote;
  return out;
}

void json_dump(const Value& v, int indent, int level, std::string& out) {
  auto newline = [&](int lvl) {
    const size_t spaces = static_cast<size_t>(indent) * static_cast<size_t>(lvl);  // both < 2^31
    check_value_bytes(add_bytes(out.size() + 1, spaces), "tojson result");
    out += '\n';
    out.append(spaces, ' ');
  };
  if (v.is_undefined()) value_fail("Object of type Undefined is not JSON serializable");
  if (v.is_none()) { out += "null"; return; }
  if (v.is_bool()) { out += v.as_bool() ? "true" : "false"; return; }
  if (v.is_int()) { out += std::to_string(v.as_int()); return; }
  if (v.is_float()) {
    double d = v.as_float();
    if (std::isnan(d)) out += "NaN";
    else if (std::isinf(d)) out += d > 0 ? "Infinity" : "-Infinity";
    else out += float_repr(d);
    return;
  }
  if (v.is_string()) { io::append_json_string(v.as_string(), out); return; }
  if (v.is_list()) {
    const auto& items = v.as_list();
    if (items.empty()) { out += "[]"; return; }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += indent >= 0 ? "," : ", ";
      if (indent >= 0) newline(level + 1);
      json_dump(items[i], indent, level + 1, out);
      check_text(out, "tojson result");
    }
    if (indent >= 0) newline(level);
    out += ']';
    return;
  }
  if (v.is_dict()) {
    const auto& items = v.as_dict().items;
    if (items.empty()) { out += "{}"; return; }
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += indent >= 0 ? "," : ", ";
      if (indent >= 0) newline(level + 1);
      io::append_json_string(items[i].first, out);
      out += ": ";
      json_dump(items[i].second, indent, level + 1, out);
      check_text(out, "tojson result");
    }
    if (indent >= 0) newline(level);
    out += '}';
    return;
  }
  value_fail("Object of type {} is not JSON serializable", v.type_name());
}

}  // namespace

void check_value_bytes(size_t bytes, const char* what) {
  if (bytes > kMaxValueBytes)
    value_fail("{} larger than {} MiB (a list or dict counts every item, and a shared part each time it appears)",
               what, kMaxValueBytes >> 20);
}

Value Value::list(std::vector<Value> items) {
  auto obj = std::make_shared<ListObj>();
  int d = 0;
  size_t bytes = kItemBytes;
  for (const auto& v : items) {
    d = std::max(d, child_depth(v));
    bytes = add_bytes(bytes, v.footprint());
  }
  check_depth(d + 1);
  check_value_bytes(bytes, "list");
  obj->depth = d + 1;
  obj->bytes = bytes;
  obj->items = std::move(items);
  return Value(Storage(std::shared_ptr<const ListObj>(std::move(obj))));
}

Value Value::tuple(std::vector<Value> items) {
  Value v = list(std::move(items));
  std::const_pointer_cast<ListObj>(std::get<std::shared_ptr<const ListObj>>(v.v_))->is_tuple = true;
  return v;
}

bool Value::is_tuple() const {
  auto p = std::get_if<std::shared_ptr<const ListObj>>(&v_);
  return p && (*p)->is_tuple;
}

Value Value::dict(std::vector<std::pair<std::string, Value>> items) {
  auto obj = std::make_shared<DictObj>();
  int d = 0;
  size_t bytes = kItemBytes;
  for (const auto& kv : items) {
    d = std::max(d, child_depth(kv.second));
    bytes = add_bytes(bytes, add_bytes(kItemBytes + kv.first.size(), kv.second.footprint()));
  }
  check_depth(d + 1);
  check_value_bytes(bytes, "dict");
  obj->depth = d + 1;
  obj->bytes = bytes;
  obj->items = std::move(items);
  return Value(Storage(std::move(obj)));
}

Value Value::make_namespace(std::vector<std::pair<std::string, Value>> items) {
  Value v = dict(std::move(items));
  std::get<std::shared_ptr<DictObj>>(v.v_)->is_namespace = true;
  return v;
}

Value Value::function(Function f) {
  return Value(Storage(std::make_shared<const Function>(std::move(f))));
}

bool Value::is_dict() const {
  auto p = std::get_if<std::shared_ptr<DictObj>>(&v_);
  return p && !(*p)->is_namespace;
}

bool Value::is_namespace() const {
  auto p = std::get_if<std::shared_ptr<DictObj>>(&v_);
  return p && (*p)->is_namespace;
}

const std::vector<Value>& Value::as_list() const {
  return std::get<std::shared_ptr<const ListObj>>(v_)->items;
}

const DictObj& Value::as_dict() const { return *std::get<std::shared_ptr<DictObj>>(v_); }

DictObj& Value::as_namespace() const { return *std::get<std::shared_ptr<DictObj>>(v_); }

double Value::to_double() const {
  if (is_int()) return static_cast<double>(as_int());
  if (is_float()) return as_float();
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  value_fail("expected a number, found {}", type_name());
}

int Value::depth() const {
  if (is_list()) return std::get<std::shared_ptr<const ListObj>>(v_)->depth;
  if (auto p = std::get_if<std::shared_ptr<DictObj>>(&v_)) return (*p)->depth;
  return 0;
}

size_t Value::footprint() const {
  if (is_string()) return add_bytes(kItemBytes, as_string().size());
  if (is_list()) return std::get<std::shared_ptr<const ListObj>>(v_)->bytes;
  if (is_dict()) return as_dict().bytes;
  return kItemBytes;
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_float() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  if (is_dict()) return !as_dict().items.empty();
  return true;  // namespace, function
}

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return repr();
}

std::string Value::repr() const {
  if (is_undefined()) return "";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return float_repr(as_float());
  if (is_string()) return repr_string(as_string());
  if (is_list()) {
    std::string out = is_tuple() ? "(" : "[";
    const auto& items = as_list();
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += ", ";
      out += items[i].repr();
      check_text(out, "string");
    }
    if (is_tuple()) return out + (items.size() == 1 ? ",)" : ")");
    return out + "]";
  }
  if (is_dict() || is_namespace()) {
    std::string out = is_namespace() ? "<Namespace {" : "{";
    const auto& items = as_dict().items;
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += ", ";
      out += repr_string(items[i].first) + ": " + items[i].second.repr();
      check_text(out, "string");
    }
    return out + (is_namespace() ? "}>" : "}");
  }
  return "<function>";
}

std::string Value::to_json(int indent) const {
  std::string out;
  json_dump(*this, indent, 0, out);
  return out;
}

std::string Value::type_name() const {
  if (is_undefined()) return "undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list()) return "list";
  if (is_dict()) return "dict";
  if (is_namespace()) return "Namespace";
  return "function";
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x == y;
  }
  if (a.v_.index() != b.v_.index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_list()) {
    if (a.is_tuple() != b.is_tuple()) return false;
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    if (x.size() != y.size()) return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (!(x[i] == y[i])) return false;
    return true;
  }
  if (a.is_dict() && b.is_dict()) {
    const auto& x = a.as_dict();
    const auto& y = b.as_dict();
    if (x.items.size() != y.items.size()) return false;
    for (const auto& [k, v] : x.items) {
      const Value* w = y.find(k);
      if (!w || !(v == *w)) return false;
    }
    return true;
  }
  // Namespaces and functions compare by identity.
  if (auto p = std::get_if<std::shared_ptr<DictObj>>(&a.v_))
    return *p == std::get<std::shared_ptr<DictObj>>(b.v_);
  if (auto p = std::get_if<std::shared_ptr<const Function>>(&a.v_))
    return *p == std::get<std::shared_ptr<const Function>>(b.v_);
  return false;
}

const Value* DictObj::find(const std::string& key) const {
  for (const auto& kv : items)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

namespace {
bool contains_namespace(const Value& v) {
  if (v.is_namespace()) return true;
  if (v.is_list()) {
    for (const auto& e : v.as_list())
      if (contains_namespace(e)) return true;
  } else if (v.is_dict()) {
    for (const auto& kv : v.as_dict().items)
      if (contains_namespace(kv.second)) return true;
  }
  return false;
}
}  // namespace

void DictObj::set(const std::string& key, Value v) {
  // A namespace holding a namespace could form a cycle (leak, endless printing): refuse it.
  if (is_namespace && contains_namespace(v)) value_fail("a namespace cannot hold a namespace");
  check_depth(v.depth() + 1);
  depth = std::max(depth, v.depth() + 1);
  for (auto& kv : items)
    if (kv.first == key) {
      kv.second = std::move(v);
      return;
    }
  items.emplace_back(key, std::move(v));
}

Value CallArgs::get(size_t index, const std::string& name) const {
  if (index < positional.size()) return positional[index];
  if (const Value* v = keyword_arg(name)) return *v;
  return Value();
}

const Value* CallArgs::keyword_arg(const std::string& name) const {
  for (const auto& kv : keyword)
    if (kv.first == name) return &kv.second;
  return nullptr;
}

bool is_ascii(const std::string& s) {
  for (unsigned char c : s)
    if (c >= 0x80) return false;
  return true;
}

namespace {
// Length of the UTF-8 sequence starting at s[i]; invalid bytes count as one character each.
size_t utf8_seq_len(const std::string& s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
  if (i + n > s.size()) return 1;
  for (size_t k = 1; k < n; ++k)
    if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return 1;
  return n;
}
}  // namespace

size_t utf8_length(const std::string& s) {
  if (is_ascii(s)) return s.size();
  size_t n = 0;
  for (size_t i = 0; i < s.size(); i += utf8_seq_len(s, i)) ++n;
  return n;
}

std::vector<std::string> utf8_chars(const std::string& s) {
  std::vector<std::string> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = utf8_seq_len(s, i);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // e.g. "-1.2345e+02"
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t epos = sci.find('e');
  std::string mant = sci.substr(0, epos);
  int exp = std::stoi(sci.substr(epos + 1));
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  int decpt = exp + 1;  // position of the decimal point relative to the digits
  std::string out;
  if (decpt <= -4 || decpt > 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += fmt::format("e{}{:02d}", exp < 0 ? '-' : '+', std::abs(exp));
  } else if (decpt <= 0) {
    out = "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
  } else if (static_cast<size_t>(decpt) >= digits.size()) {
    out = digits + std::string(static_cast<size_t>(decpt) - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
  }
  return sign + out;
}

}  // namespace fp4lm::tokenizer::jinja
