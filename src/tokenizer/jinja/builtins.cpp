#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>

#include <utf8proc.h>

namespace fp4lm::tokenizer::jinja {
namespace {

// ---- small helpers ----

std::string need_string(const Value& v, const char* what) {
  if (!v.is_string()) value_fail("{} expects a string, found {}", what, v.type_name());
  return v.as_string();
}

int64_t need_int(const Value& v, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  value_fail("{} expects an integer, found {}", what, v.type_name());
}

[[noreturn]] void undefined_fail(const Value& v) {
  if (v.undefined_name().empty()) value_fail("value is undefined");
  value_fail("'{}' is undefined", v.undefined_name());
}

std::vector<uint32_t> decode(const std::string& s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = static_cast<utf8proc_ssize_t>(s.size());
  while (left > 0) {
    utf8proc_int32_t cp = 0;
    utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) {  // invalid byte: keep it as a Latin-1 code point rather than failing
      cp = *p;
      n = 1;
    }
    out.push_back(static_cast<uint32_t>(cp));
    p += n;
    left -= n;
  }
  return out;
}

std::string encode(const std::vector<uint32_t>& cps) {
  std::string out;
  out.reserve(cps.size());
  utf8proc_uint8_t buf[4];
  for (uint32_t cp : cps) {
    utf8proc_ssize_t n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
    out.append(reinterpret_cast<const char*>(buf), static_cast<size_t>(n));
  }
  return out;
}

// Python's str.isspace() for one code point.
bool py_space(uint32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0)
    return true;
  if (cp < 0x80) return false;
  auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

// str.strip / lstrip / rstrip; chars undefined or None -> whitespace.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  std::vector<uint32_t> set;
  bool ws = chars.is_undefined() || chars.is_none();
  if (!ws) set = decode(need_string(chars, "strip"));
  auto strip_it = [&](uint32_t cp) {
    return ws ? py_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  std::vector<uint32_t> cps = decode(s);
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  if (b == 0 && e == cps.size()) return s;
  return encode(std::vector<uint32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                      cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

enum class Case { Upper, Lower, Title, Capitalize };

std::string change_case(const std::string& s, Case c) {
  std::vector<uint32_t> cps = decode(s);
  bool word_start = true;
  for (size_t i = 0; i < cps.size(); ++i) {
    auto cp = static_cast<utf8proc_int32_t>(cps[i]);
    utf8proc_int32_t r = cp;
    switch (c) {
      case Case::Upper: r = utf8proc_toupper(cp); break;
      case Case::Lower: r = utf8proc_tolower(cp); break;
      case Case::Capitalize: r = i == 0 ? utf8proc_totitle(cp) : utf8proc_tolower(cp); break;
      case Case::Title: {
        r = word_start ? utf8proc_totitle(cp) : utf8proc_tolower(cp);
        auto cat = utf8proc_category(cp);
        bool cased = cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
        word_start = !cased;
        break;
      }
    }
    cps[i] = static_cast<uint32_t>(r);
  }
  return encode(cps);
}

std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character (and at both ends)
    auto chars = utf8_chars(s);
    int64_t n = 0;
    for (const auto& ch : chars) {
      if (count < 0 || n < count) { out += to; ++n; }
      out += ch;
      if (out.size() > kMaxStringBytes) value_fail("string result larger than {} bytes", kMaxStringBytes);
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    if (out.size() > kMaxStringBytes) value_fail("string result larger than {} bytes", kMaxStringBytes);
    pos = hit + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

Value split(const std::string& s, const Value& sep_v, const Value& maxsplit_v) {
  int64_t maxsplit = (maxsplit_v.is_undefined() || maxsplit_v.is_none()) ? -1 : need_int(maxsplit_v, "split");
  std::vector<Value> parts;
  if (sep_v.is_undefined() || sep_v.is_none()) {  // runs of whitespace, no empty parts
    std::vector<uint32_t> cps = decode(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && py_space(cps[e - 1])) --e;
        parts.push_back(encode({cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(e)}));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !py_space(cps[j])) ++j;
      parts.push_back(encode({cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j)}));
      i = j;
    }
    return Value::list(std::move(parts));
  }
  const std::string& sep = need_string(sep_v, "split");
  if (sep.empty()) value_fail("split: empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
    size_t hit = s.find(sep, pos);
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(pos, hit - pos));
    pos = hit + sep.size();
  }
  parts.push_back(s.substr(pos));
  return Value::list(std::move(parts));
}

Value rsplit(const std::string& s, const Value& sep_v, const Value& maxsplit_v) {
  int64_t maxsplit = (maxsplit_v.is_undefined() || maxsplit_v.is_none()) ? -1 : need_int(maxsplit_v, "rsplit");
  if (maxsplit < 0 || sep_v.is_undefined() || sep_v.is_none()) {
    if (maxsplit < 0) return split(s, sep_v, Value());
    value_fail("rsplit with maxsplit needs a separator");
  }
  const std::string& sep = need_string(sep_v, "rsplit");
  if (sep.empty()) value_fail("rsplit: empty separator");
  std::vector<Value> parts;
  size_t end = s.size();
  while (static_cast<int64_t>(parts.size()) < maxsplit) {
    if (end < sep.size()) break;
    size_t hit = s.rfind(sep, end - sep.size());
    if (hit == std::string::npos) break;
    parts.push_back(s.substr(hit + sep.size(), end - hit - sep.size()));
    end = hit;
  }
  parts.push_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return Value::list(std::move(parts));
}

bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const std::string& a) {
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    for (const auto& a : affix.as_list())
      if (one(need_string(a, prefix ? "startswith" : "endswith"))) return true;
    return false;
  }
  return one(need_string(affix, prefix ? "startswith" : "endswith"));
}

bool all_chars(const std::string& s, const std::function<bool(uint32_t)>& pred) {
  if (s.empty()) return false;
  for (uint32_t cp : decode(s))
    if (!pred(cp)) return false;
  return true;
}

Value string_method(const std::string& s, const std::string& name) {
  auto bind = [&](std::function<Value(const std::string&, const CallArgs&)> f) {
    return Value::function([s, f = std::move(f)](const CallArgs& a) { return f(s, a); });
  };
  if (name == "startswith")
    return bind([](const std::string& x, const CallArgs& a) { return Value(affix_match(x, a.get(0, "prefix"), true)); });
  if (name == "endswith")
    return bind([](const std::string& x, const CallArgs& a) { return Value(affix_match(x, a.get(0, "suffix"), false)); });
  if (name == "split")
    return bind([](const std::string& x, const CallArgs& a) { return split(x, a.get(0, "sep"), a.get(1, "maxsplit")); });
  if (name == "rsplit")
    return bind([](const std::string& x, const CallArgs& a) { return rsplit(x, a.get(0, "sep"), a.get(1, "maxsplit")); });
  if (name == "strip")
    return bind([](const std::string& x, const CallArgs& a) { return Value(strip(x, a.get(0, "chars"), true, true)); });
  if (name == "lstrip")
    return bind([](const std::string& x, const CallArgs& a) { return Value(strip(x, a.get(0, "chars"), true, false)); });
  if (name == "rstrip")
    return bind([](const std::string& x, const CallArgs& a) { return Value(strip(x, a.get(0, "chars"), false, true)); });
  if (name == "replace")
    return bind([](const std::string& x, const CallArgs& a) {
      Value count = a.get(2, "count");
      return Value(replace_all(x, need_string(a.get(0, "old"), "replace"), need_string(a.get(1, "new"), "replace"),
                               count.is_undefined() ? -1 : need_int(count, "replace")));
    });
  if (name == "upper") return bind([](const std::string& x, const CallArgs&) { return Value(change_case(x, Case::Upper)); });
  if (name == "lower") return bind([](const std::string& x, const CallArgs&) { return Value(change_case(x, Case::Lower)); });
  if (name == "title") return bind([](const std::string& x, const CallArgs&) { return Value(change_case(x, Case::Title)); });
  if (name == "capitalize")
    return bind([](const std::string& x, const CallArgs&) { return Value(change_case(x, Case::Capitalize)); });
  if (name == "find")
    return bind([](const std::string& x, const CallArgs& a) {
      size_t hit = x.find(need_string(a.get(0, "sub"), "find"));
      if (hit == std::string::npos) return Value(-1);
      return Value(static_cast<int64_t>(utf8_length(x.substr(0, hit))));
    });
  if (name == "count")
    return bind([](const std::string& x, const CallArgs& a) {
      const std::string& sub = need_string(a.get(0, "sub"), "count");
      if (sub.empty()) return Value(static_cast<int64_t>(utf8_length(x) + 1));
      int64_t n = 0;
      for (size_t p = x.find(sub); p != std::string::npos; p = x.find(sub, p + sub.size())) ++n;
      return Value(n);
    });
  if (name == "join")
    return bind([](const std::string& x, const CallArgs& a) {
      std::string out;
      bool first = true;
      for (const auto& v : iterate(a.get(0, "iterable"))) {
        if (!first) out += x;
        first = false;
        out += need_string(v, "join");
        if (out.size() > kMaxStringBytes) value_fail("string result larger than {} bytes", kMaxStringBytes);
      }
      return Value(out);
    });
  if (name == "isdigit")
    return bind([](const std::string& x, const CallArgs&) {
      return Value(all_chars(x, [](uint32_t c) { return c >= '0' && c <= '9'; }));
    });
  if (name == "isspace") return bind([](const std::string& x, const CallArgs&) { return Value(all_chars(x, py_space)); });
  if (name == "isalpha" || name == "isalnum")
    return bind([alnum = name == "isalnum"](const std::string& x, const CallArgs&) {
      return Value(all_chars(x, [alnum](uint32_t c) {
        auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
        bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        bool digit = cat == UTF8PROC_CATEGORY_ND;
        return letter || (alnum && digit);
      }));
    });
  if (name == "islower" || name == "isupper")
    return bind([upper = name == "isupper"](const std::string& x, const CallArgs&) {
      std::string changed = change_case(x, upper ? Case::Upper : Case::Lower);
      std::string other = change_case(x, upper ? Case::Lower : Case::Upper);
      return Value(changed == x && other != x);
    });
  return Value(Undefined{name});
}

Value dict_method(const Value& d, const std::string& name) {
  if (name == "get")
    return Value::function([d](const CallArgs& a) {
      Value key = a.get(0, "key");
      if (key.is_string())
        if (const Value* v = d.as_dict().find(key.as_string())) return *v;
      Value def = a.get(1, "default");
      return def.is_undefined() ? Value(None{}) : def;
    });
  if (name == "items")
    return Value::function([d](const CallArgs&) {
      std::vector<Value> out;
      for (const auto& [k, v] : d.as_dict().items) out.push_back(Value::tuple({Value(k), v}));
      return Value::list(std::move(out));
    });
  if (name == "keys")
    return Value::function([d](const CallArgs&) {
      std::vector<Value> out;
      for (const auto& kv : d.as_dict().items) out.push_back(Value(kv.first));
      return Value::list(std::move(out));
    });
  if (name == "values")
    return Value::function([d](const CallArgs&) {
      std::vector<Value> out;
      for (const auto& kv : d.as_dict().items) out.push_back(kv.second);
      return Value::list(std::move(out));
    });
  return Value();
}

// Python ordering for <, <=, >, >=, sort, min, max: numbers, strings, lists.
int compare(const Value& a, const Value& b, const char* op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.to_double(), y = b.to_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order = code point order
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i] == y[i]) continue;
      return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) undefined_fail(a);
  if (b.is_undefined()) undefined_fail(b);
  value_fail("'{}' not supported between instances of '{}' and '{}'", op, a.type_name(), b.type_name());
}

bool contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      value_fail("'in <string>' requires string as left operand, not {}", item.type_name());
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_list()) {
    for (const auto& v : container.as_list())
      if (v == item) return true;
    return false;
  }
  if (container.is_dict() || container.is_namespace())
    return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
  if (container.is_undefined()) return false;  // Jinja's Undefined iterates as empty
  value_fail("argument of type '{}' is not iterable", container.type_name());
}

int64_t negate_checked(int64_t x) {
  if (x == INT64_MIN) value_fail("integer overflow");
  return -x;
}

std::string repeat(const std::string& s, int64_t n) {
  if (n <= 0 || s.empty()) return "";
  if (static_cast<uint64_t>(n) > kMaxStringBytes / s.size())
    value_fail("string result larger than {} bytes", kMaxStringBytes);
  std::string out;
  out.reserve(s.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) out += s;
  return out;
}

int64_t as_integer(const Value& v) { return v.is_bool() ? (v.as_bool() ? 1 : 0) : v.as_int(); }
bool is_integral(const Value& v) { return v.is_int() || v.is_bool(); }

[[noreturn]] void operand_fail(const std::string& op, const Value& a, const Value& b) {
  if (a.is_undefined()) undefined_fail(a);
  if (b.is_undefined()) undefined_fail(b);
  value_fail("unsupported operand types for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
}

// Looks up a dotted attribute path ("a.b", "0") as Jinja's attribute filters do.
Value attr_path(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  while (true) {
    size_t dot = path.find('.', pos);
    std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    bool numeric = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    cur = numeric ? get_item(cur, Value(static_cast<int64_t>(std::stoll(part)))) : get_item(cur, Value(part));
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

CallArgs tail_args(const CallArgs& args, size_t from) {
  CallArgs out;
  for (size_t i = from; i < args.positional.size(); ++i) out.positional.push_back(args.positional[i]);
  out.keyword = args.keyword;
  return out;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value sort_keys(const Value& v) {
  if (v.is_list()) {
    std::vector<Value> out;
    for (const auto& e : v.as_list()) out.push_back(sort_keys(e));
    return Value::list(std::move(out));
  }
  if (v.is_dict()) {
    auto items = v.as_dict().items;
    for (auto& kv : items) kv.second = sort_keys(kv.second);
    std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    return Value::dict(std::move(items));
  }
  return v;
}

std::string indent_filter(const std::string& s, const Value& width_v, bool first, bool blank) {
  // Python builds " " * width first (nothing for a negative width), so a width beyond the string
  // limit fails whatever the text, as Jinja2 runs out of memory.
  const int64_t width = width_v.is_string() ? 0 : width_v.is_undefined() ? 4 : need_int(width_v, "indent");
  if (!width_v.is_string() && width > static_cast<int64_t>(kMaxStringBytes))
    value_fail("indent width {} makes a string larger than {} bytes", width, kMaxStringBytes);
  std::string ind = width_v.is_string()
                        ? width_v.as_string()
                        : std::string(static_cast<size_t>(std::clamp<int64_t>(width, 0, static_cast<int64_t>(kMaxStringBytes))), ' ');
  std::vector<std::string> lines;
  std::string text = s + "\n";  // Jinja's quirk so that splitlines() keeps a trailing empty line
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    lines.push_back(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
  std::string out = lines.empty() ? "" : lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    out += "\n";
    if (blank || !lines[i].empty()) {
      if (out.size() + ind.size() > kMaxStringBytes) value_fail("string result larger than {} bytes", kMaxStringBytes);
      out += ind;
    }
    out += lines[i];
    if (out.size() > kMaxStringBytes) value_fail("string result larger than {} bytes", kMaxStringBytes);
  }
  if (first) {
    if (out.size() + ind.size() > kMaxStringBytes) value_fail("string result larger than {} bytes", kMaxStringBytes);
    out = ind + out;
  }
  return out;
}

Value python_round(double x, int64_t precision, const std::string& method) {
  double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -300, 300)));
  double y = x * scale;
  if (method == "common") y = std::nearbyint(y);  // Python's round(): half to even
  else if (method == "ceil") y = std::ceil(y);
  else if (method == "floor") y = std::floor(y);
  else value_fail("round: method must be 'common', 'ceil' or 'floor'");
  return Value(y / scale);
}

Value to_int(const Value& v, const Value& def) {
  Value fallback = def.is_undefined() ? Value(0) : def;
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  // Jinja2's int(): int(x), else int(float(x)), else the default. Python's int is unbounded,
  // ours 64-bit: a value Python would turn into a bigger integer is an error, not a wrong number.
  auto truncate = [](double d, const std::string& shown) -> Value {
    if (!(d > -9223372036854775808.0 && d < 9223372036854775808.0))
      value_fail("int: {} does not fit in a 64-bit integer", shown);
    return Value(static_cast<int64_t>(d));
  };
  if (v.is_float()) {
    double d = v.as_float();
    if (std::isnan(d)) return fallback;  // int(nan) is a ValueError, caught by Jinja2
    if (std::isinf(d)) value_fail("cannot convert float infinity to integer");  // OverflowError escapes Jinja2
    return truncate(d, float_repr(d));
  }
  if (v.is_string()) {
    std::string s = strip(v.as_string(), Value(), true, true);
    if (s.empty()) return fallback;
    errno = 0;
    char* end = nullptr;
    long long r = std::strtoll(s.c_str(), &end, 10);
    if (*end == '\0' && s.find_first_not_of("+-0123456789") == std::string::npos) {
      if (errno == ERANGE) value_fail("int: '{}' does not fit in a 64-bit integer", s);
      return Value(static_cast<int64_t>(r));
    }
    double d = std::strtod(s.c_str(), &end);
    // float('inf') / float('1e400') overflow int() -> OverflowError, which Jinja2 catches here.
    if (*end == '\0' && std::isfinite(d)) return truncate(d, "'" + s + "'");
  }
  return fallback;
}

Value to_float(const Value& v, const Value& def) {
  Value fallback = def.is_undefined() ? Value(0.0) : def;
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string()) {
    std::string s = strip(v.as_string(), Value(), true, true);
    char* end = nullptr;
    double d = std::strtod(s.c_str(), &end);
    if (!s.empty() && *end == '\0') return Value(d);
  }
  return fallback;
}

size_t length_of(const Value& v) {
  if (v.is_string()) return utf8_length(v.as_string());
  if (v.is_list()) return v.as_list().size();
  if (v.is_dict() || v.is_namespace()) return v.as_dict().items.size();
  if (v.is_undefined()) return 0;
  value_fail("object of type '{}' has no len()", v.type_name());
}

Value select_like(const Value& seq, const CallArgs& args, bool by_attr, bool keep) {
  std::vector<Value> out;
  std::string attr;
  size_t test_at = 0;
  if (by_attr) {
    attr = need_string(args.get(0, "attribute"), "selectattr");
    test_at = 1;
  }
  Value test_name = test_at < args.positional.size() ? args.positional[test_at] : Value();
  CallArgs test_args = tail_args(args, test_at + 1);
  test_args.keyword.clear();
  for (const auto& item : iterate(seq)) {
    Value subject = by_attr ? attr_path(item, attr) : item;
    bool ok = test_name.is_undefined() ? subject.truthy()
                                       : apply_test(need_string(test_name, "select"), subject, test_args);
    if (ok == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

using FilterFn = std::function<Value(const Value&, const CallArgs&)>;

const std::map<std::string, FilterFn>& filters() {
  static const std::map<std::string, FilterFn> table = [] {
    std::map<std::string, FilterFn> t;
    t["length"] = [](const Value& v, const CallArgs&) { return Value(static_cast<int64_t>(length_of(v))); };
    t["count"] = t["length"];
    t["tojson"] = [](const Value& v, const CallArgs& a) {
      for (const auto& kv : a.keyword)
        if (kv.first != "indent" && kv.first != "sort_keys" && kv.first != "ensure_ascii")
          value_fail("tojson: unsupported argument '{}'", kv.first);
      if (const Value* ea = a.keyword_arg("ensure_ascii"); ea && ea->truthy())
        value_fail("tojson: ensure_ascii=true is not supported");
      Value ind = a.get(0, "indent");
      // json.dumps: a negative indent indents by nothing (still one item per line); a huge one
      // fails on the first line break that outgrows the limit.
      int indent = (ind.is_undefined() || ind.is_none())
                       ? -1
                       : static_cast<int>(std::clamp<int64_t>(need_int(ind, "tojson indent"), 0,
                                                              static_cast<int64_t>(kMaxValueBytes) + 1));
      const Value* sk = a.keyword_arg("sort_keys");
      return Value((sk && sk->truthy() ? sort_keys(v) : v).to_json(indent));
    };
    t["trim"] = [](const Value& v, const CallArgs& a) {
      return Value(strip(need_string(v, "trim"), a.get(0, "chars"), true, true));
    };
    t["upper"] = [](const Value& v, const CallArgs&) { return Value(change_case(v.str(), Case::Upper)); };
    t["lower"] = [](const Value& v, const CallArgs&) { return Value(change_case(v.str(), Case::Lower)); };
    t["capitalize"] = [](const Value& v, const CallArgs&) { return Value(change_case(v.str(), Case::Capitalize)); };
    t["title"] = [](const Value& v, const CallArgs&) { return Value(change_case(v.str(), Case::Title)); };
    t["default"] = [](const Value& v, const CallArgs& a) {
      Value def = a.get(0, "default_value");
      if (def.is_undefined()) def = Value("");
      bool boolean = a.get(1, "boolean").truthy();
      if (v.is_undefined() || (boolean && !v.truthy())) return def;
      return v;
    };
    t["d"] = t["default"];
    t["join"] = [](const Value& v, const CallArgs& a) {
      Value sep = a.get(0, "d");
      Value attribute = a.get(1, "attribute");
      std::string s = sep.is_undefined() ? "" : sep.str();
      std::string out;
      bool first = true;
      for (const auto& e : iterate(v)) {
        if (!first) out += s;
        first = false;
        out += (attribute.is_undefined() ? e : attr_path(e, attribute.str())).str();
        if (out.size() > kMaxStringBytes) value_fail("string result larger than {} bytes", kMaxStringBytes);
      }
      return Value(out);
    };
    t["first"] = [](const Value& v, const CallArgs&) {
      auto items = iterate(v);
      return items.empty() ? Value(Undefined{"first"}) : items.front();
    };
    t["last"] = [](const Value& v, const CallArgs&) {
      auto items = iterate(v);
      return items.empty() ? Value(Undefined{"last"}) : items.back();
    };
    t["string"] = [](const Value& v, const CallArgs&) { return Value(v.str()); };
    t["items"] = [](const Value& v, const CallArgs&) {
      if (v.is_undefined()) return Value::list({});
      if (!v.is_dict()) value_fail("items expects a mapping, found {}", v.type_name());
      std::vector<Value> out;
      for (const auto& [k, e] : v.as_dict().items) out.push_back(Value::tuple({Value(k), e}));
      return Value::list(std::move(out));
    };
    // Jinja2's do_dictsort: (key, value) pairs sorted by key (or by="value"), strings compared
    // lowercased unless case_sensitive; a stable sort, as Python's sorted (Gemma 4's template
    // orders tool parameters and call arguments with it).
    t["dictsort"] = [](const Value& v, const CallArgs& a) {
      if (!v.is_dict()) value_fail("dictsort expects a mapping, found {}", v.type_name());
      const bool case_sensitive = a.get(0, "case_sensitive").truthy();
      const Value by = a.get(1, "by");
      const std::string by_name = by.is_undefined() ? "key" : need_string(by, "dictsort");
      if (by_name != "key" && by_name != "value") value_fail("dictsort: you can only sort by either \"key\" or \"value\"");
      const size_t pos = by_name == "key" ? 0 : 1;
      const bool reverse = a.get(2, "reverse").truthy();
      std::vector<Value> items;
      std::vector<Value> keys;
      for (const auto& [k, e] : v.as_dict().items) {
        Value sort_key = pos == 0 ? Value(k) : e;
        if (!case_sensitive && sort_key.is_string()) sort_key = Value(change_case(sort_key.as_string(), Case::Lower));
        items.push_back(Value::tuple({Value(k), e}));
        keys.push_back(std::move(sort_key));
      }
      std::vector<size_t> order(items.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
        return reverse ? compare(keys[y], keys[x], "<") < 0 : compare(keys[x], keys[y], "<") < 0;
      });
      std::vector<Value> out;
      for (size_t i : order) out.push_back(items[i]);
      return Value::list(std::move(out));
    };
    t["list"] = [](const Value& v, const CallArgs&) { return Value::list(iterate(v)); };
    t["replace"] = [](const Value& v, const CallArgs& a) {
      Value count = a.get(2, "count");
      return Value(replace_all(v.str(), a.get(0, "old").str(), a.get(1, "new").str(),
                               (count.is_undefined() || count.is_none()) ? -1 : need_int(count, "replace")));
    };
    t["int"] = [](const Value& v, const CallArgs& a) { return to_int(v, a.get(0, "default")); };
    t["float"] = [](const Value& v, const CallArgs& a) { return to_float(v, a.get(0, "default")); };
    t["abs"] = [](const Value& v, const CallArgs&) {
      if (v.is_int()) return Value(v.as_int() < 0 ? negate_checked(v.as_int()) : v.as_int());
      if (v.is_number()) return Value(std::fabs(v.to_double()));
      value_fail("abs expects a number, found {}", v.type_name());
    };
    t["round"] = [](const Value& v, const CallArgs& a) {
      Value p = a.get(0, "precision");
      Value m = a.get(1, "method");
      return python_round(v.to_double(), p.is_undefined() ? 0 : need_int(p, "round"), m.is_undefined() ? "common" : m.str());
    };
    t["reverse"] = [](const Value& v, const CallArgs&) {
      if (v.is_string()) {
        auto chars = utf8_chars(v.as_string());
        std::string out;
        for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
        return Value(out);
      }
      auto items = iterate(v);
      std::reverse(items.begin(), items.end());
      return Value::list(std::move(items));
    };
    t["sort"] = [](const Value& v, const CallArgs& a) {
      auto items = iterate(v);
      bool reverse = a.get(0, "reverse").truthy();
      bool case_sensitive = a.get(1, "case_sensitive").truthy();
      Value attribute = a.get(2, "attribute");
      auto key = [&](const Value& e) {
        Value k = attribute.is_undefined() ? e : attr_path(e, attribute.str());
        if (!case_sensitive && k.is_string()) return Value(change_case(k.as_string(), Case::Lower));
        return k;
      };
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return reverse ? compare(key(y), key(x), "<") < 0 : compare(key(x), key(y), "<") < 0;
      });
      return Value::list(std::move(items));
    };
    t["unique"] = [](const Value& v, const CallArgs&) {
      std::vector<Value> out;
      for (const auto& e : iterate(v))
        if (std::find(out.begin(), out.end(), e) == out.end()) out.push_back(e);
      return Value::list(std::move(out));
    };
    t["min"] = [](const Value& v, const CallArgs&) {
      auto items = iterate(v);
      if (items.empty()) return Value(Undefined{"min"});
      Value best = items[0];
      for (const auto& e : items)
        if (compare(e, best, "<") < 0) best = e;
      return best;
    };
    t["max"] = [](const Value& v, const CallArgs&) {
      auto items = iterate(v);
      if (items.empty()) return Value(Undefined{"max"});
      Value best = items[0];
      for (const auto& e : items)
        if (compare(e, best, ">") > 0) best = e;
      return best;
    };
    t["sum"] = [](const Value& v, const CallArgs& a) {
      Value attribute = a.get(0, "attribute");
      Value total = a.get(1, "start");
      if (total.is_undefined()) total = Value(0);
      for (const auto& e : iterate(v))
        total = binary_op("+", total, attribute.is_undefined() ? e : attr_path(e, attribute.str()));
      return total;
    };
    t["map"] = [](const Value& v, const CallArgs& a) {
      std::vector<Value> out;
      if (const Value* attribute = a.keyword_arg("attribute")) {
        const Value* def = a.keyword_arg("default");
        for (const auto& e : iterate(v)) {
          Value r = attr_path(e, attribute->str());
          out.push_back(r.is_undefined() && def ? *def : r);
        }
      } else {
        std::string name = need_string(a.get(0, "filter"), "map");
        CallArgs rest = tail_args(a, 1);
        for (const auto& e : iterate(v)) out.push_back(apply_filter(name, e, rest));
      }
      return Value::list(std::move(out));
    };
    t["select"] = [](const Value& v, const CallArgs& a) { return select_like(v, a, false, true); };
    t["reject"] = [](const Value& v, const CallArgs& a) { return select_like(v, a, false, false); };
    t["selectattr"] = [](const Value& v, const CallArgs& a) { return select_like(v, a, true, true); };
    t["rejectattr"] = [](const Value& v, const CallArgs& a) { return select_like(v, a, true, false); };
    // attr() is getattr only: a dict's keys are not attributes (its methods are).
    t["attr"] = [](const Value& v, const CallArgs& a) {
      const std::string& name = need_string(a.get(0, "name"), "attr");
      if (v.is_dict()) return dict_method(v, name);
      return get_attr(v, name);
    };
    t["indent"] = [](const Value& v, const CallArgs& a) {
      return Value(indent_filter(v.str(), a.get(0, "width"), a.get(1, "first").truthy(), a.get(2, "blank").truthy()));
    };
    t["safe"] = [](const Value& v, const CallArgs&) { return v; };
    t["escape"] = [](const Value& v, const CallArgs&) { return Value(html_escape(v.str())); };
    t["e"] = t["escape"];
    t["wordcount"] = [](const Value& v, const CallArgs&) {
      return Value(static_cast<int64_t>(split(v.str(), Value(), Value()).as_list().size()));
    };
    return t;
  }();
  return table;
}

using TestFn = std::function<bool(const Value&, const CallArgs&)>;

const std::map<std::string, TestFn>& tests() {
  static const std::map<std::string, TestFn> table = [] {
    std::map<std::string, TestFn> t;
    t["defined"] = [](const Value& v, const CallArgs&) { return !v.is_undefined(); };
    t["undefined"] = [](const Value& v, const CallArgs&) { return v.is_undefined(); };
    t["none"] = [](const Value& v, const CallArgs&) { return v.is_none(); };
    t["boolean"] = [](const Value& v, const CallArgs&) { return v.is_bool(); };
    t["true"] = [](const Value& v, const CallArgs&) { return v.is_bool() && v.as_bool(); };
    t["false"] = [](const Value& v, const CallArgs&) { return v.is_bool() && !v.as_bool(); };
    t["integer"] = [](const Value& v, const CallArgs&) { return v.is_int(); };
    t["float"] = [](const Value& v, const CallArgs&) { return v.is_float(); };
    t["number"] = [](const Value& v, const CallArgs&) { return v.is_number(); };
    t["string"] = [](const Value& v, const CallArgs&) { return v.is_string(); };
    t["mapping"] = [](const Value& v, const CallArgs&) { return v.is_dict(); };
    // Jinja's Undefined is iterable (empty) and has a length, so it passes these two.
    t["iterable"] = [](const Value& v, const CallArgs&) {
      return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
    };
    t["sequence"] = t["iterable"];
    t["callable"] = [](const Value& v, const CallArgs&) { return v.is_callable(); };
    t["even"] = [](const Value& v, const CallArgs&) { return need_int(v, "even") % 2 == 0; };
    t["odd"] = [](const Value& v, const CallArgs&) { return need_int(v, "odd") % 2 != 0; };
    t["divisibleby"] = [](const Value& v, const CallArgs& a) {
      int64_t d = need_int(a.get(0, "num"), "divisibleby");
      if (d == 0) value_fail("divisibleby: division by zero");
      return need_int(v, "divisibleby") % d == 0;
    };
    t["eq"] = [](const Value& v, const CallArgs& a) { return v == a.get(0, "other"); };
    t["equalto"] = t["eq"];
    t["=="] = t["eq"];
    t["ne"] = [](const Value& v, const CallArgs& a) { return !(v == a.get(0, "other")); };
    t["!="] = t["ne"];
    t["lt"] = [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), "<") < 0; };
    t["lessthan"] = t["lt"];
    t["le"] = [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), "<=") <= 0; };
    t["gt"] = [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), ">") > 0; };
    t["greaterthan"] = t["gt"];
    t["ge"] = [](const Value& v, const CallArgs& a) { return compare(v, a.get(0, "other"), ">=") >= 0; };
    t["in"] = [](const Value& v, const CallArgs& a) { return contains(a.get(0, "seq"), v); };
    t["sameas"] = [](const Value& v, const CallArgs& a) {
      Value o = a.get(0, "other");
      if (v.is_none() || o.is_none() || v.is_bool() || o.is_bool())
        return v.type_name() == o.type_name() && v == o;
      return v.type_name() == o.type_name() && v == o && !v.is_list() && !v.is_dict();
    };
    t["lower"] = [](const Value& v, const CallArgs&) {
      return v.is_string() && change_case(v.as_string(), Case::Lower) == v.as_string();
    };
    t["upper"] = [](const Value& v, const CallArgs&) {
      return v.is_string() && change_case(v.as_string(), Case::Upper) == v.as_string();
    };
    t["escaped"] = [](const Value&, const CallArgs&) { return false; };
    return t;
  }();
  return table;
}

}  // namespace

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string x = a.str(), y = b.str();
    if (x.size() + y.size() > kMaxStringBytes) value_fail("string result larger than {} bytes", kMaxStringBytes);
    return Value(x + y);
  }
  if (op == "==") return Value(a == b);
  if (op == "!=") return Value(!(a == b));
  if (op == "<") return Value(compare(a, b, "<") < 0);
  if (op == "<=") return Value(compare(a, b, "<=") <= 0);
  if (op == ">") return Value(compare(a, b, ">") > 0);
  if (op == ">=") return Value(compare(a, b, ">=") >= 0);
  if (op == "in") return Value(contains(b, a));
  if (op == "not in") return Value(!contains(b, a));

  bool ints = is_integral(a) && is_integral(b);
  bool nums = a.is_number() && b.is_number();
  if (op == "+") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_add_overflow(as_integer(a), as_integer(b), &r)) value_fail("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.to_double() + b.to_double());
    if (a.is_string() && b.is_string()) {
      if (a.as_string().size() + b.as_string().size() > kMaxStringBytes)
        value_fail("string result larger than {} bytes", kMaxStringBytes);
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      check_value_bytes(add_bytes(a.footprint(), b.footprint()), "list result");
      std::vector<Value> out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return a.is_tuple() && b.is_tuple() ? Value::tuple(std::move(out)) : Value::list(std::move(out));
    }
    operand_fail(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_sub_overflow(as_integer(a), as_integer(b), &r)) value_fail("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.to_double() - b.to_double());
    operand_fail(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r = 0;
      if (__builtin_mul_overflow(as_integer(a), as_integer(b), &r)) value_fail("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.to_double() * b.to_double());
    if (a.is_string() && is_integral(b)) return Value(repeat(a.as_string(), as_integer(b)));
    if (is_integral(a) && b.is_string()) return Value(repeat(b.as_string(), as_integer(a)));
    if (a.is_list() && is_integral(b)) {
      int64_t n = as_integer(b);
      std::vector<Value> out;
      if (n > 0 && !a.as_list().empty()) {
        if (static_cast<uint64_t>(n) > kMaxRangeLength / a.as_list().size())
          value_fail("list result longer than {} items", kMaxRangeLength);
        if (static_cast<uint64_t>(n) > kMaxValueBytes / a.footprint()) check_value_bytes(SIZE_MAX, "list result");
        for (int64_t i = 0; i < n; ++i) out.insert(out.end(), a.as_list().begin(), a.as_list().end());
      }
      return Value::list(std::move(out));
    }
    operand_fail(op, a, b);
  }
  if (op == "/") {
    if (!nums) operand_fail(op, a, b);
    if (b.to_double() == 0.0) value_fail("division by zero");
    return Value(a.to_double() / b.to_double());
  }
  if (op == "//" || op == "%") {
    if (!nums) {
      if (op == "%" && a.is_string()) value_fail("printf-style string formatting ('%') is not supported");
      operand_fail(op, a, b);
    }
    if (ints) {
      int64_t x = as_integer(a), y = as_integer(b);
      if (y == 0) value_fail("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) value_fail("integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {  // Python floors toward negative infinity
        q -= 1;
        r += y;
      }
      return Value(op == "//" ? q : r);
    }
    double x = a.to_double(), y = b.to_double();
    if (y == 0.0) value_fail("float division or modulo by zero");
    if (op == "//") return Value(std::floor(x / y));
    double r = std::fmod(x, y);
    if (r != 0.0) {
      if ((r < 0) != (y < 0)) r += y;
    } else {
      r = std::copysign(0.0, y);  // Python: the zero takes the divisor's sign
    }
    return Value(r);
  }
  if (op == "**") {
    if (ints && as_integer(b) >= 0) {
      int64_t base = as_integer(a), e = as_integer(b), r = 1;
      while (e-- > 0) {
        if (__builtin_mul_overflow(r, base, &r)) value_fail("integer overflow");
        if (r == 0 || r == 1) break;
      }
      return Value(r);
    }
    if (nums) {
      // Python's float power: errors where it raises instead of C's inf / nan.
      const double x = a.to_double(), y = b.to_double();
      if (x == 0.0 && y < 0.0 && std::isfinite(y)) value_fail("0.0 cannot be raised to a negative power");
      if (x < 0.0 && std::isfinite(x) && std::isfinite(y) && y != std::floor(y))
        value_fail("a negative number raised to a fractional power is complex, which is not supported");
      const double r = std::pow(x, y);
      if (std::isinf(r) && std::isfinite(x) && std::isfinite(y)) value_fail("numerical result out of range");
      return Value(r);
    }
    operand_fail(op, a, b);
  }
  value_fail("unknown operator '{}'", op);
}

Value unary_op(const std::string& op, const Value& a) {
  if (op == "not") return Value(!a.truthy());
  if (a.is_undefined()) undefined_fail(a);
  if (op == "-") {
    if (is_integral(a)) return Value(negate_checked(as_integer(a)));
    if (a.is_float()) return Value(-a.as_float());
  }
  if (op == "+") {
    if (is_integral(a)) return Value(as_integer(a));
    if (a.is_float()) return a;
  }
  value_fail("bad operand type for unary {}: '{}'", op, a.type_name());
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_dict()) {
    Value m = dict_method(obj, name);
    if (!m.is_undefined()) return m;
    if (const Value* v = obj.as_dict().find(name)) return *v;
    return Value(Undefined{name});
  }
  if (obj.is_namespace()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
    return Value(Undefined{name});
  }
  if (obj.is_string()) return string_method(obj.as_string(), name);
  return Value(Undefined{name});
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_dict() || obj.is_namespace()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      return get_attr(obj, key.as_string());
    }
    return Value(Undefined{key.str()});
  }
  if ((obj.is_list() || obj.is_string()) && is_integral(key)) {
    int64_t i = as_integer(key);
    if (obj.is_list()) {
      int64_t n = static_cast<int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value(Undefined{key.str()});
      return obj.as_list()[static_cast<size_t>(i)];
    }
    const std::string& s = obj.as_string();
    if (is_ascii(s)) {
      int64_t n = static_cast<int64_t>(s.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value(Undefined{key.str()});
      return Value(std::string(1, s[static_cast<size_t>(i)]));
    }
    auto chars = utf8_chars(s);
    int64_t n = static_cast<int64_t>(chars.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Value(Undefined{key.str()});
    return Value(chars[static_cast<size_t>(i)]);
  }
  if (key.is_string()) return get_attr(obj, key.as_string());
  return Value(Undefined{key.str()});
}

Value slice(const Value& obj, const Value& start_v, const Value& stop_v, const Value& step_v) {
  if (obj.is_undefined()) undefined_fail(obj);
  auto omitted = [](const Value& v) { return v.is_undefined() || v.is_none(); };
  int64_t step = omitted(step_v) ? 1 : need_int(step_v, "slice step");
  if (step == 0) value_fail("slice step cannot be zero");
  std::vector<std::string> chars;
  int64_t len;
  if (obj.is_list()) {
    len = static_cast<int64_t>(obj.as_list().size());
  } else if (obj.is_string()) {
    chars = utf8_chars(obj.as_string());
    len = static_cast<int64_t>(chars.size());
  } else {
    value_fail("'{}' object is not subscriptable with a slice", obj.type_name());
  }
  // Python's PySlice_AdjustIndices.
  auto adjust = [&](const Value& v, int64_t def) {
    if (omitted(v)) return def;
    int64_t i = need_int(v, "slice index");
    if (i < 0) {
      i += len;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= len) {
      i = step < 0 ? len - 1 : len;
    }
    return i;
  };
  int64_t start = adjust(start_v, step < 0 ? len - 1 : 0);
  int64_t stop = adjust(stop_v, step < 0 ? -1 : len);
  std::vector<size_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(static_cast<size_t>(i));
  if (obj.is_list()) {
    std::vector<Value> out;
    out.reserve(idx.size());
    for (size_t i : idx) out.push_back(obj.as_list()[i]);
    return Value::list(std::move(out));
  }
  std::string out;
  for (size_t i : idx) out += chars[i];
  return Value(out);
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_list()) return v.as_list();
  if (v.is_dict()) {
    std::vector<Value> out;
    for (const auto& kv : v.as_dict().items) out.push_back(Value(kv.first));
    return out;
  }
  if (v.is_string()) {
    // One value per character: bounded like a list of them.
    check_value_bytes(add_bytes(kItemBytes, utf8_length(v.as_string()) * (kItemBytes + 1)), "list of characters");
    std::vector<Value> out;
    for (auto& c : utf8_chars(v.as_string())) out.push_back(Value(std::move(c)));
    return out;
  }
  if (v.is_undefined()) return {};
  value_fail("'{}' object is not iterable", v.type_name());
}

bool has_filter(const std::string& name) { return filters().count(name) != 0; }
bool has_test(const std::string& name) { return tests().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& v, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) value_fail("unknown filter '{}'", name);
  return it->second(v, args);
}

bool apply_test(const std::string& name, const Value& v, const CallArgs& args) {
  auto it = tests().find(name);
  if (it == tests().end()) value_fail("unknown test '{}'", name);
  return it->second(v, args);
}

std::vector<std::pair<std::string, Value>> global_functions() {
  std::vector<std::pair<std::string, Value>> g;
  g.emplace_back("range", Value::function([](const CallArgs& a) {
    if (a.positional.empty() || a.positional.size() > 3) value_fail("range expects 1 to 3 arguments");
    int64_t start = 0, stop, step = 1;
    if (a.positional.size() == 1) {
      stop = need_int(a.positional[0], "range");
    } else {
      start = need_int(a.positional[0], "range");
      stop = need_int(a.positional[1], "range");
      if (a.positional.size() == 3) step = need_int(a.positional[2], "range");
    }
    if (step == 0) value_fail("range() arg 3 must not be zero");
    std::vector<Value> out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
      if (out.size() >= kMaxRangeLength) value_fail("range longer than {} items", kMaxRangeLength);
      out.push_back(Value(i));
      if ((step > 0 && i > INT64_MAX - step) || (step < 0 && i < INT64_MIN - step)) break;
    }
    return Value::list(std::move(out));
  }));
  g.emplace_back("namespace", Value::function([](const CallArgs& a) {
    Value ns = Value::make_namespace({});
    if (a.positional.size() > 1) value_fail("namespace() takes at most one positional argument");
    if (a.positional.size() == 1) {
      if (!a.positional[0].is_dict()) value_fail("namespace() expects a mapping");
      for (const auto& [k, v] : a.positional[0].as_dict().items) ns.as_namespace().set(k, v);
    }
    for (const auto& [k, v] : a.keyword) ns.as_namespace().set(k, v);
    return ns;
  }));
  g.emplace_back("dict", Value::function([](const CallArgs& a) {
    std::vector<std::pair<std::string, Value>> items;
    if (!a.positional.empty()) value_fail("dict() supports keyword arguments only");
    for (const auto& kv : a.keyword) items.push_back(kv);
    return Value::dict(std::move(items));
  }));
  g.emplace_back("raise_exception", Value::function([](const CallArgs& a) -> Value {
    throw ValueError(a.get(0, "message").str());
  }));
  // As Hugging Face provides it: the current local time, formatted by strftime.
  g.emplace_back("strftime_now", Value::function([](const CallArgs& a) {
    const std::string& format = need_string(a.get(0, "format"), "strftime_now");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    std::string buf(256 + format.size() * 8, '\0');
    size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &tm);
    buf.resize(n);
    return Value(buf);
  }));
  return g;
}

}  // namespace fp4lm::tokenizer::jinja
