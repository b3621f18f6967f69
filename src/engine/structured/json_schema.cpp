#include "engine/structured/json_schema.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <functional>
#include <set>

#include "engine/structured/grammar_error.h"
#include "engine/structured/json_string_chars.h"
#include "engine/structured/numeric_range.h"
#include "engine/structured/regex_syntax.h"

namespace fp4lm::engine::structured {

namespace {

using json = nlohmann::ordered_json;  // properties keep the order the schema gives

Expr lit(const std::string& s) { return Expr::bytes(s); }
Expr rule(const std::string& s) { return Expr::ref(s); }
Expr opt(Expr e) { return Expr::repeat(std::move(e), 0, 1); }
Expr star(Expr e) { return Expr::repeat(std::move(e), 0, -1); }

// Rules every JSON grammar shares. `ws` is a gap inside brackets and before ',' and ':';
// `ws_item` follows ',' and `ws_key` follows ':' (they differ only in compact mode).
void define_json_basics(ExprGrammar& g, const JsonWhitespace& w) {
  if (w.compact) {
    g.define("ws", Expr::empty());
    g.define("ws_item", lit(" "));
    g.define("ws_key", lit(" "));
  } else {
    g.define("ws", opt(Expr::alt({lit(" "), Expr::seq({lit("\n"), Expr::repeat(Expr::chars({{' ', ' '}, {'\t', '\t'}}), 0,
                                                                                   std::max(0, w.max_indent))})})));
    g.define("ws_item", rule("ws"));
    g.define("ws_key", rule("ws"));
  }
  g.define("json_char", json_string_char());
  g.define("json_string", Expr::seq({lit("\""), star(rule("json_char")), lit("\"")}));
  const Expr digit = Expr::chars({{'0', '9'}});
  g.define("json_uint", Expr::alt({lit("0"), Expr::seq({Expr::chars({{'1', '9'}}), star(digit)})}));
  g.define("json_integer", Expr::seq({opt(lit("-")), rule("json_uint")}));
  g.define("json_fraction_exp", Expr::seq({opt(Expr::seq({lit("."), Expr::repeat(digit, 1, -1)})),
                                           opt(Expr::seq({Expr::chars({{'e', 'e'}, {'E', 'E'}}),
                                                          opt(Expr::chars({{'+', '+'}, {'-', '-'}})),
                                                          Expr::repeat(digit, 1, -1)}))}));
  g.define("json_number", Expr::seq({rule("json_integer"), rule("json_fraction_exp")}));
  g.define("json_value", Expr::alt({rule("json_object"), rule("json_array"), rule("json_string"), rule("json_number"),
                                    lit("true"), lit("false"), lit("null")}));
  const Expr member = Expr::seq({rule("json_string"), rule("ws"), lit(":"), rule("ws_key"), rule("json_value"), rule("ws")});
  g.define("json_object", Expr::seq({lit("{"), rule("ws"),
                                     opt(Expr::seq({member, star(Expr::seq({lit(","), rule("ws_item"), member}))})), lit("}")}));
  const Expr element = Expr::seq({rule("json_value"), rule("ws")});
  g.define("json_array", Expr::seq({lit("["), rule("ws"),
                                    opt(Expr::seq({element, star(Expr::seq({lit(","), rule("ws_item"), element}))})), lit("]")}));
}

// String formats (the ones xgrammar and llguidance enforce), as regexes over the string's text.
const std::map<std::string, std::string>& string_formats() {
  static const std::string octet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  static const std::string ipv4 = octet + "(\\." + octet + "){3}";
  static const std::string h = "[0-9a-fA-F]{1,4}";
  static const std::string ipv6 = "(" + h + ":){7}" + h + "|(" + h + ":){1,7}:|(" + h + ":){1,6}:" + h + "|(" + h +
                                  ":){1,5}(:" + h + "){1,2}|(" + h + ":){1,4}(:" + h + "){1,3}|(" + h + ":){1,3}(:" + h +
                                  "){1,4}|(" + h + ":){1,2}(:" + h + "){1,5}|" + h + ":(:" + h + "){1,6}|:((:" + h +
                                  "){1,7}|:)";
  static const std::string label = "[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?";
  static const std::string hostname = label + "(\\." + label + ")*";
  // RFC 3986: scheme ":" then path, query and fragment characters (unreserved, %XX, sub-delims,
  // ":" "@" "/" "?"); one "#" at most.
  static const std::string uchar = "([a-zA-Z0-9._~!$&'()*+,;=:@/?-]|%[0-9a-fA-F]{2})";
  static const std::map<std::string, std::string> formats = {
      {"date", R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))"},
      {"time", R"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)"},
      {"date-time", R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
      {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      {"ipv4", ipv4},
      {"ipv6", ipv6},
      {"hostname", hostname},
      // Local part: dot-separated runs of anything but blanks, '@' and '.'; domain: a hostname
      // or an IPv4 literal in brackets.
      {"email", "[^\\s@.]+(\\.[^\\s@.]+)*@(" + hostname + "|\\[" + ipv4 + "\\])"},
      {"uri", "[a-zA-Z][a-zA-Z0-9+.-]*:" + uchar + "*(#" + uchar + "*)?"},
  };
  return formats;
}

const std::set<std::string> kIgnored = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict",
                                        "name", "discriminator"};
const std::set<std::string> kHandled = {
    "type",          "properties",    "required",         "additionalProperties", "patternProperties",
    "minProperties", "maxProperties", "items",            "prefixItems",          "additionalItems",
    "minItems",      "maxItems",      "enum",             "const",                "anyOf",
    "oneOf",         "allOf",         "$ref",             "minLength",            "maxLength",
    "pattern",       "format",        "minimum",          "maximum",              "exclusiveMinimum",
    "exclusiveMaximum", "uniqueItems"};

// A JSON pointer's reference token for `key` (RFC 6901: ~ and / escaped), for error locations.
std::string pointer_token(const std::string& key) {
  std::string out;
  for (char c : key) out += c == '~' ? std::string("~0") : c == '/' ? std::string("~1") : std::string(1, c);
  return out;
}

class SchemaCompiler {
 public:
  SchemaCompiler(const json& root, const JsonWhitespace& w) : root_(root) { define_json_basics(g_, w); }

  ExprGrammar run() {
    g_.define("root", compile(root_, "#"));
    return std::move(g_);
  }

 private:
  [[noreturn]] static void fail(const std::string& path, const std::string& what) {
    throw GrammarError(fmt::format("JSON schema: {} at {}", what, path));
  }
  std::string fresh(const std::string& stem) { return fmt::format("{}_{}", stem, ++counter_); }

  static int64_t count_of(const json& s, const char* key, const std::string& path) {
    const json& v = s.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 0) fail(path, fmt::format("'{}' must be a non-negative integer", key));
    if (v.get<int64_t>() > 100000) fail(path, fmt::format("'{}' is too large (at most 100000 supported)", key));
    return v.get<int64_t>();
  }

  Expr compile(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(path, "the schema 'false' matches nothing");
      return rule("json_value");
    }
    if (!s.is_object()) fail(path, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items())
      if (!kIgnored.count(k) && !kHandled.count(k)) fail(path, fmt::format("unsupported keyword '{}'", k));
    if (s.contains("$ref")) return compile_ref(s.at("$ref"), path);
    if (s.contains("const")) return lit(s.at("const").dump());
    if (s.contains("enum")) {
      const json& e = s.at("enum");
      if (!e.is_array() || e.empty()) fail(path, "'enum' must be a non-empty array");
      std::vector<Expr> alts;
      for (const auto& v : e) alts.push_back(lit(v.dump()));
      return Expr::alt(std::move(alts));
    }
    for (const char* key : {"anyOf", "oneOf"})
      if (s.contains(key)) {
        const json& list = s.at(key);
        if (!list.is_array() || list.empty()) fail(path, fmt::format("'{}' must be a non-empty array", key));
        std::vector<Expr> alts;
        for (size_t i = 0; i < list.size(); ++i) alts.push_back(compile(list[i], fmt::format("{}/{}/{}", path, key, i)));
        return Expr::alt(std::move(alts));
      }
    if (s.contains("allOf")) {
      const json& list = s.at("allOf");
      if (!list.is_array() || list.size() != 1) fail(path, "'allOf' with more than one schema is not supported");
      return compile(list[0], path + "/allOf/0");
    }
    if (s.contains("uniqueItems") && s.at("uniqueItems") == true) fail(path, "unsupported keyword 'uniqueItems' (true)");
    if (s.contains("type")) {
      const json& t = s.at("type");
      if (t.is_string()) return compile_type(t.get<std::string>(), s, path);
      if (!t.is_array() || t.empty()) fail(path, "'type' must be a string or a non-empty array of strings");
      std::vector<Expr> alts;
      for (const auto& x : t) {
        if (!x.is_string()) fail(path, "'type' must be a string or a non-empty array of strings");
        alts.push_back(compile_type(x.get<std::string>(), s, path));
      }
      return Expr::alt(std::move(alts));
    }
    for (const char* k : {"properties", "additionalProperties", "required", "patternProperties", "minProperties",
                          "maxProperties"})
      if (s.contains(k)) return compile_type("object", s, path);
    for (const char* k : {"items", "prefixItems", "additionalItems", "minItems", "maxItems"})
      if (s.contains(k)) return compile_type("array", s, path);
    for (const char* k : {"pattern", "minLength", "maxLength", "format"})
      if (s.contains(k)) return compile_type("string", s, path);
    for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
      if (s.contains(k)) return compile_type("number", s, path);
    return rule("json_value");
  }

  Expr compile_ref(const json& r, const std::string& path) {
    if (!r.is_string()) fail(path, "'$ref' must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return rule(it->second);
    if (target.empty() || target[0] != '#') fail(path, fmt::format("'$ref' '{}': only references into this document (#...) are supported", target));
    const json* node = &root_;
    if (target.size() > 1) {
      try {
        node = &root_.at(json::json_pointer(target.substr(1)));
      } catch (const std::exception&) {
        fail(path, fmt::format("'$ref' '{}' points to nothing", target));
      }
    }
    const std::string name = fresh("ref");
    refs_[target] = name;
    g_.define(name, Expr::empty());  // placeholder: recursive references resolve to the name
    g_.define(name, compile(*node, target));
    return rule(name);
  }

  Expr compile_type(const std::string& type, const json& s, const std::string& path) {
    if (type == "null") return lit("null");
    if (type == "boolean") return Expr::alt({lit("true"), lit("false")});
    if (type == "integer" || type == "number") return compile_number(type == "integer", s, path);
    if (type == "string") return compile_string(s, path);
    if (type == "array") return compile_array(s, path);
    if (type == "object") return compile_object(s, path);
    fail(path, fmt::format("unknown type '{}'", type));
  }

  // A bound as the value it has in the schema (exact) and as the shortest decimal that reads back
  // as the same double (what a validator that parses doubles compares against).
  struct Bound {
    NumberBound exact, shortest;
    std::string text;  // for messages
  };
  static Bound bound_of(const json& v, const char* key, bool exclusive, const std::string& path) {
    if (!v.is_number()) fail(path, fmt::format("'{}' must be a number", key));
    Bound b;
    b.text = fmt::format("{} {}", key, v.dump());
    try {
      if (v.is_number_float()) {
        b.exact = {Decimal::exact(v.get<double>()), exclusive};
        b.shortest = {Decimal::shortest(v.get<double>()), exclusive};
      } else {
        b.exact = b.shortest = {Decimal::parse(v.dump()), exclusive};
      }
    } catch (const GrammarError& e) {
      fail(path, fmt::format("'{}': {}", key, e.what()));
    }
    return b;
  }

  // The tighter of `minimum` / `exclusiveMinimum` (or of the maxima); draft 4's boolean
  // exclusiveMinimum / exclusiveMaximum turn the plain bound exclusive.
  static std::optional<Bound> bound(const json& s, const char* plain, const char* excl, bool lower,
                                    const std::string& path) {
    std::optional<Bound> out;
    bool draft4_exclusive = false;
    if (s.contains(excl) && s.at(excl).is_boolean()) {
      draft4_exclusive = s.at(excl).get<bool>();
      if (draft4_exclusive && !s.contains(plain)) fail(path, fmt::format("'{}': true needs '{}'", excl, plain));
    } else if (s.contains(excl)) {
      out = bound_of(s.at(excl), excl, true, path);
    }
    if (s.contains(plain)) {
      Bound b = bound_of(s.at(plain), plain, draft4_exclusive, path);
      const int c = out ? compare(b.exact.value, out->exact.value) : 0;
      // Equal values: the exclusive one is tighter and is already `out`.
      if (!out || (lower ? c > 0 : c < 0)) out = std::move(b);
    }
    return out;
  }

  Expr compile_number(bool integer, const json& s, const std::string& path) {
    const auto lo = bound(s, "minimum", "exclusiveMinimum", true, path);
    const auto hi = bound(s, "maximum", "exclusiveMaximum", false, path);
    if (!lo && !hi) return rule(integer ? "json_integer" : "json_number");
    // minimum 0 alone: every non-negative JSON number (exponents included) is exact.
    if (lo && !hi && !lo->exact.exclusive && lo->exact.value.int_digits == "0" && lo->exact.value.frac_digits.empty())
      return integer ? rule("json_uint") : Expr::seq({rule("json_uint"), rule("json_fraction_exp")});
    const auto exact = [](const std::optional<Bound>& b) { return b ? std::optional(b->exact) : std::nullopt; };
    const auto shortest = [](const std::optional<Bound>& b) { return b ? std::optional(b->shortest) : std::nullopt; };
    std::vector<Expr> alts;
    if (auto e = integer_range(exact(lo), exact(hi))) alts.push_back(std::move(*e));
    if (!integer)
      if (auto e = fraction_range(shortest(lo), shortest(hi))) alts.push_back(std::move(*e));
    if (alts.empty()) {
      std::string range = lo ? lo->text : "";
      if (hi) range += (range.empty() ? "" : " and ") + hi->text;
      fail(path, fmt::format("no {} satisfies {}", integer ? "integer" : "number", range));
    }
    return Expr::alt(std::move(alts));
  }

  Expr compile_string(const json& s, const std::string& path) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("pattern")) {
      if (lengths) fail(path, "'pattern' together with 'minLength'/'maxLength' is not supported");
      if (!s.at("pattern").is_string()) fail(path, "'pattern' must be a string");
      std::string p = s.at("pattern").get<std::string>();
      try {
        return Expr::seq({lit("\""), parse_regex(p, true), lit("\"")});
      } catch (const GrammarError& e) {
        fail(path + "/pattern", e.what());
      }
    }
    if (s.contains("format")) {
      if (lengths) fail(path, "'format' together with 'minLength'/'maxLength' is not supported");
      const std::string f = s.at("format").is_string() ? s.at("format").get<std::string>() : "";
      auto it = string_formats().find(f);
      if (it == string_formats().end()) {
        std::string names;
        for (const auto& [name, re] : string_formats()) names += (names.empty() ? "" : ", ") + name;
        fail(path, fmt::format("unsupported string format {} (supported: {})", s.at("format").dump(), names));
      }
      return Expr::seq({lit("\""), parse_regex(it->second, true), lit("\"")});
    }
    const int64_t lo = s.contains("minLength") ? count_of(s, "minLength", path) : 0;
    const int64_t hi = s.contains("maxLength") ? count_of(s, "maxLength", path) : -1;
    if (hi >= 0 && hi < lo) fail(path, "'maxLength' is less than 'minLength'");
    if (!lengths) return rule("json_string");
    return Expr::seq({lit("\""), Expr::repeat(rule("json_char"), lo, hi), lit("\"")});
  }

  // prefixItems (or draft 4's `items` as a list) in order, then `items` (or `additionalItems`)
  // for the rest; minItems / maxItems count them all. A prefix may stop early (JSON Schema does
  // not require the prefix to be complete).
  Expr compile_array(const json& s, const std::string& path) {
    std::vector<Expr> prefix;
    std::optional<Expr> rest = rule("json_value");  // nullopt: no further items
    const char* rest_key = "items";
    auto rest_schema = [&](const char* key) {
      const json& r = s.at(key);
      if (r.is_boolean() && !r.get<bool>()) rest.reset();
      else rest = compile(r, path + "/" + key);
    };
    auto prefix_list = [&](const char* key) {
      const json& list = s.at(key);
      if (!list.is_array()) fail(path, fmt::format("'{}' must be an array of schemas", key));
      for (size_t i = 0; i < list.size(); ++i) prefix.push_back(compile(list[i], fmt::format("{}/{}/{}", path, key, i)));
    };
    if (s.contains("prefixItems")) {
      prefix_list("prefixItems");
      if (s.contains("additionalItems")) fail(path, "'additionalItems' goes with a list 'items'; with 'prefixItems' use 'items'");
    } else if (s.contains("items") && s.at("items").is_array()) {
      prefix_list("items");
      rest_key = "additionalItems";
    } else if (s.contains("additionalItems")) {
      fail(path, "'additionalItems' needs 'items' as a list of schemas");
    }
    // Strict, as with additionalProperties: after a prefix, no further items unless allowed.
    if (!prefix.empty()) rest.reset();
    if (s.contains(rest_key) && !(rest_key == std::string("items") && s.at("items").is_array())) rest_schema(rest_key);
    const int64_t lo = s.contains("minItems") ? count_of(s, "minItems", path) : 0;
    int64_t hi = s.contains("maxItems") ? count_of(s, "maxItems", path) : -1;
    if (hi >= 0 && hi < lo) fail(path, "'maxItems' is less than 'minItems'");
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (!rest) {
      if (lo > k) fail(path, fmt::format("'minItems' {} needs more items than the {} the array allows", lo, k));
      hi = hi < 0 ? k : std::min(hi, k);
    }
    // after[i]: what may follow once i items are written (i >= 1), built from the back.
    const Expr comma = Expr::seq({lit(","), rule("ws_item")});
    auto item = [&](const Expr& e) { return Expr::seq({e, rule("ws")}); };
    std::optional<Expr> tail;  // after k items: the rest
    if (rest && (hi < 0 || hi > k)) {
      const std::string r = fresh("item");
      g_.define(r, item(*rest));
      tail = Expr::repeat(Expr::seq({comma, rule(r)}), std::max<int64_t>(lo - std::max<int64_t>(k, 1), 0),
                          hi < 0 ? -1 : hi - std::max<int64_t>(k, 1));
    }
    // Without a prefix: the first item is a `rest` item.
    if (k == 0) {
      if (hi == 0 || !rest) return Expr::seq({lit("["), rule("ws"), lit("]")});
      const std::string r = fresh("item");
      g_.define(r, item(*rest));
      Expr body = Expr::seq({rule(r), tail ? *tail : Expr::empty()});
      if (lo == 0) body = opt(std::move(body));
      return Expr::seq({lit("["), rule("ws"), std::move(body), lit("]")});
    }
    std::optional<Expr> after = tail;  // after[k]
    if (!after && lo <= k) after = Expr::empty();
    for (int64_t i = k - 1; i >= 1; --i) {
      // after[i]: stop (if i >= minItems) or write prefix item i then after[i+1].
      std::vector<Expr> alts;
      if (i >= lo) alts.push_back(Expr::empty());
      if ((hi < 0 || i + 1 <= hi) && after) {
        const std::string r = fresh("after_items");
        g_.define(r, *after);
        alts.push_back(Expr::seq({comma, item(prefix[static_cast<size_t>(i)]), rule(r)}));
      }
      if (alts.empty()) after.reset();
      else after = Expr::alt(std::move(alts));
    }
    std::vector<Expr> alts;
    if (lo == 0) alts.push_back(Expr::empty());
    if (hi != 0 && after) alts.push_back(Expr::seq({item(prefix[0]), *after}));
    if (alts.empty()) fail(path, "no array satisfies 'minItems' / 'maxItems' with these items");
    return Expr::seq({lit("["), rule("ws"), Expr::alt(std::move(alts)), lit("]")});
  }

  Expr compile_object(const json& s, const std::string& path) {
    std::vector<std::pair<std::string, Expr>> props;  // member rule per property, schema order
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s.at("required").is_array()) fail(path, "'required' must be an array of strings");
      for (const auto& r : s.at("required")) {
        if (!r.is_string()) fail(path, "'required' must be an array of strings");
        required.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      const json& p = s.at("properties");
      if (!p.is_object()) fail(path, "'properties' must be an object");
      for (const auto& [k, v] : p.items()) {
        const std::string member = fresh("member");
        g_.define(member, Expr::seq({lit(json(k).dump()), rule("ws"), lit(":"), rule("ws_key"),
                                     compile(v, path + "/properties/" + pointer_token(k)), rule("ws")}));
        props.emplace_back(k, rule(member));
      }
    }
    for (const auto& r : required) {
      bool found = false;
      for (const auto& [k, e] : props) found = found || k == r;
      if (!found) fail(path, fmt::format("required property '{}' is not in 'properties'", r));
    }
    // Additional members (keys outside `properties` are not checked against them): those of
    // patternProperties (the key matches the pattern), else those of additionalProperties.
    std::optional<Expr> extra;
    if (s.contains("patternProperties")) {
      const json& pp = s.at("patternProperties");
      if (!pp.is_object()) fail(path, "'patternProperties' must be an object");
      if (s.contains("additionalProperties") && s.at("additionalProperties") != false)
        fail(path, "'additionalProperties' other than false together with 'patternProperties' is not supported");
      std::vector<Expr> alts;
      for (const auto& [pattern, v] : pp.items()) {
        const std::string where = path + "/patternProperties/" + pointer_token(pattern);
        Expr key;
        try {
          key = parse_regex(pattern, true);
        } catch (const GrammarError& e) {
          fail(where, e.what());
        }
        alts.push_back(Expr::seq({lit("\""), std::move(key), lit("\""), rule("ws"), lit(":"), rule("ws_key"),
                                  compile(v, where), rule("ws")}));
      }
      if (!alts.empty()) {
        const std::string member = fresh("pattern_member");
        g_.define(member, Expr::alt(std::move(alts)));
        extra = rule(member);
      }
    } else if (s.contains("additionalProperties")) {
      const json& a = s.at("additionalProperties");
      if (!(a.is_boolean() && !a.get<bool>())) {
        const std::string member = fresh("extra_member");
        g_.define(member, Expr::seq({rule("json_string"), rule("ws"), lit(":"), rule("ws_key"),
                                     compile(a, path + "/additionalProperties"), rule("ws")}));
        extra = rule(member);
      }
    }
    const int64_t min_p = s.contains("minProperties") ? count_of(s, "minProperties", path) : 0;
    const int64_t max_p = s.contains("maxProperties") ? count_of(s, "maxProperties", path) : -1;
    if (max_p >= 0 && max_p < min_p) fail(path, "'maxProperties' is less than 'minProperties'");
    return Expr::seq({lit("{"), rule("ws"), members(props, required, extra, min_p, max_p, path), lit("}")});
  }

  // The members, declared ones in schema order (optional ones may be left out), then the extra
  // ones; rule (i, c) is "members i.. when c have been written", c counted up to
  // max(1, maxProperties or minProperties) (c > 0: a ',' comes first).
  Expr members(const std::vector<std::pair<std::string, Expr>>& props, const std::set<std::string>& required,
               const std::optional<Expr>& extra, int64_t min_p, int64_t max_p, const std::string& path) {
    const int64_t n = static_cast<int64_t>(props.size());
    const int64_t cap = std::max<int64_t>(1, max_p >= 0 ? max_p : min_p);
    // One rule per (property, count): keep hostile schemas from building millions of them.
    if (n * (std::min(n, cap) + 1) > 200000)
      fail(path, fmt::format("'minProperties' / 'maxProperties' over {} properties: too many combinations", n));
    std::vector<int64_t> required_from(static_cast<size_t>(n) + 1, 0);
    for (int64_t i = n; i-- > 0;)
      required_from[static_cast<size_t>(i)] =
          required_from[static_cast<size_t>(i) + 1] + (required.count(props[static_cast<size_t>(i)].first) ? 1 : 0);
    // Whether the members from i on can be completed when c were written.
    auto feasible = [&](int64_t i, int64_t c) {
      const bool enough = extra || c + (n - i) >= min_p;
      const bool not_too_many = max_p < 0 || c + required_from[static_cast<size_t>(i)] <= max_p;
      return enough && not_too_many;
    };
    if (!feasible(0, 0))
      fail(path, "no object satisfies 'minProperties' / 'maxProperties' with these properties");
    const Expr comma = Expr::seq({lit(","), rule("ws_item")});
    std::map<std::pair<int64_t, int64_t>, std::string> names;
    std::function<Expr(int64_t, int64_t)> at = [&](int64_t i, int64_t c) -> Expr {
      auto key = std::make_pair(i, c);
      if (auto it = names.find(key); it != names.end()) return rule(it->second);
      const std::string name = fresh(c == 0 ? "members" : "more_members");
      names[key] = name;
      std::vector<Expr> alts;
      if (i == n) {
        // e extra members, min_p - c <= e <= max_p - c.
        const int64_t e_lo = std::max<int64_t>(0, min_p - c), e_hi = max_p < 0 ? -1 : max_p - c;
        if (e_lo == 0) alts.push_back(Expr::empty());
        if (extra && e_hi != 0) {
          if (c > 0) {
            alts.push_back(Expr::repeat(Expr::seq({comma, *extra}), std::max<int64_t>(e_lo, 1), e_hi));
          } else {
            alts.push_back(Expr::seq({*extra, Expr::repeat(Expr::seq({comma, *extra}), std::max<int64_t>(e_lo - 1, 0),
                                                           e_hi < 0 ? -1 : e_hi - 1)}));
          }
        }
      } else {
        const Expr& item = props[static_cast<size_t>(i)].second;
        const int64_t c1 = std::min(c + 1, cap);
        if ((max_p < 0 || c + 1 <= max_p) && feasible(i + 1, c1)) {
          Expr next = at(i + 1, c1);
          alts.push_back(c > 0 ? Expr::seq({comma, item, std::move(next)}) : Expr::seq({item, std::move(next)}));
        }
        if (!required.count(props[static_cast<size_t>(i)].first) && feasible(i + 1, c)) alts.push_back(at(i + 1, c));
      }
      g_.define(name, Expr::alt(std::move(alts)));
      return rule(name);
    };
    return at(0, 0);
  }

  const json& root_;
  ExprGrammar g_;
  std::map<std::string, std::string> refs_;
  int counter_ = 0;
};

}  // namespace

ExprGrammar compile_json_schema(const std::string& schema_json, const JsonWhitespace& whitespace) {
  json schema;
  try {
    schema = json::parse(schema_json);
  } catch (const json::parse_error& e) {
    throw GrammarError(fmt::format("JSON schema: not valid JSON: {}", e.what()));
  }
  return SchemaCompiler(schema, whitespace).run();
}

ExprGrammar any_json_object(const JsonWhitespace& whitespace) {
  ExprGrammar g;
  define_json_basics(g, whitespace);
  g.define("root", rule("json_object"));
  return g;
}

}  // namespace fp4lm::engine::structured
