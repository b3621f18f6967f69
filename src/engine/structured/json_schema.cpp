#include "engine/structured/json_schema.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <set>

#include "engine/structured/grammar_error.h"
#include "engine/structured/json_string_chars.h"
#include "engine/structured/regex_syntax.h"

namespace fp4lm::engine::structured {

namespace {

using json = nlohmann::ordered_json;  // properties keep the order the schema gives

Expr lit(const std::string& s) { return Expr::bytes(s); }
Expr rule(const std::string& s) { return Expr::ref(s); }
Expr opt(Expr e) { return Expr::repeat(std::move(e), 0, 1); }
Expr star(Expr e) { return Expr::repeat(std::move(e), 0, -1); }

// Rules every JSON grammar shares.
void define_json_basics(ExprGrammar& g) {
  g.define("ws", opt(Expr::alt({lit(" "), Expr::seq({lit("\n"), Expr::repeat(Expr::chars({{' ', ' '}, {'\t', '\t'}}), 0, 20)})})));
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
  const Expr member = Expr::seq({rule("json_string"), rule("ws"), lit(":"), rule("ws"), rule("json_value"), rule("ws")});
  g.define("json_object",
           Expr::seq({lit("{"), rule("ws"), opt(Expr::seq({member, star(Expr::seq({lit(","), rule("ws"), member}))})), lit("}")}));
  const Expr element = Expr::seq({rule("json_value"), rule("ws")});
  g.define("json_array",
           Expr::seq({lit("["), rule("ws"), opt(Expr::seq({element, star(Expr::seq({lit(","), rule("ws"), element}))})), lit("]")}));
}

const std::set<std::string> kIgnored = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
                                        "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict",
                                        "name", "discriminator"};
const std::set<std::string> kHandled = {"type", "properties", "required", "additionalProperties", "items", "minItems",
                                        "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength",
                                        "maxLength", "pattern", "format", "minimum", "exclusiveMinimum",
                                        "uniqueItems"};

class SchemaCompiler {
 public:
  explicit SchemaCompiler(const json& root) : root_(root) { define_json_basics(g_); }

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
    if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required"))
      return compile_type("object", s, path);
    if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return compile_type("array", s, path);
    if (s.contains("pattern") || s.contains("minLength") || s.contains("maxLength") || s.contains("format"))
      return compile_type("string", s, path);
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

  Expr compile_number(bool integer, const json& s, const std::string& path) {
    bool non_negative = false;
    if (s.contains("minimum")) {
      const json& m = s.at("minimum");
      if (!m.is_number() || m.get<double>() < 0)
        fail(path, "keyword 'minimum' is supported only as a non-negative bound (it drops the sign)");
      if (m.get<double>() > 0) fail(path, "keyword 'minimum' above 0 is not supported (only minimum 0)");
      non_negative = true;
    }
    if (s.contains("exclusiveMinimum")) fail(path, "unsupported keyword 'exclusiveMinimum'");
    const Expr uint = rule("json_uint");
    if (integer) return non_negative ? uint : rule("json_integer");
    return non_negative ? Expr::seq({uint, rule("json_fraction_exp")}) : rule("json_number");
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
      static const std::map<std::string, std::string> kFormats = {
          {"date", R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01]))"},
          {"time", R"(([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])?)"},
          {"date-time", R"([0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]+)?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9]))"},
          {"uuid", R"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"},
      };
      auto it = kFormats.find(f);
      if (it == kFormats.end()) fail(path, fmt::format("unsupported string format '{}' (supported: date, time, date-time, uuid)", s.at("format").dump()));
      return Expr::seq({lit("\""), parse_regex(it->second, true), lit("\"")});
    }
    const int64_t lo = s.contains("minLength") ? count_of(s, "minLength", path) : 0;
    const int64_t hi = s.contains("maxLength") ? count_of(s, "maxLength", path) : -1;
    if (hi >= 0 && hi < lo) fail(path, "'maxLength' is less than 'minLength'");
    if (!lengths) return rule("json_string");
    return Expr::seq({lit("\""), Expr::repeat(rule("json_char"), lo, hi), lit("\"")});
  }

  Expr compile_array(const json& s, const std::string& path) {
    const Expr item = s.contains("items") ? compile(s.at("items"), path + "/items") : rule("json_value");
    const int64_t lo = s.contains("minItems") ? count_of(s, "minItems", path) : 0;
    const int64_t hi = s.contains("maxItems") ? count_of(s, "maxItems", path) : -1;
    if (hi >= 0 && hi < lo) fail(path, "'maxItems' is less than 'minItems'");
    if (hi == 0) return Expr::seq({lit("["), rule("ws"), lit("]")});
    const std::string item_rule = fresh("item");
    g_.define(item_rule, Expr::seq({item, rule("ws")}));
    Expr rest = Expr::repeat(Expr::seq({lit(","), rule("ws"), rule(item_rule)}), std::max<int64_t>(lo - 1, 0),
                             hi < 0 ? -1 : hi - 1);
    Expr body = Expr::seq({rule(item_rule), std::move(rest)});
    if (lo == 0) body = opt(std::move(body));
    return Expr::seq({lit("["), rule("ws"), std::move(body), lit("]")});
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
        g_.define(member, Expr::seq({lit(json(k).dump()), rule("ws"), lit(":"), rule("ws"),
                                     compile(v, path + "/properties/" + k), rule("ws")}));
        props.emplace_back(k, rule(member));
      }
    }
    for (const auto& r : required) {
      bool found = false;
      for (const auto& [k, e] : props) found = found || k == r;
      if (!found) fail(path, fmt::format("required property '{}' is not in 'properties'", r));
    }
    // Additional members (keys outside `properties` are not checked against them).
    std::optional<Expr> extra;
    if (s.contains("additionalProperties")) {
      const json& a = s.at("additionalProperties");
      if (!(a.is_boolean() && !a.get<bool>())) {
        const std::string member = fresh("extra_member");
        g_.define(member, Expr::seq({rule("json_string"), rule("ws"), lit(":"), rule("ws"),
                                     compile(a, path + "/additionalProperties"), rule("ws")}));
        extra = rule(member);
      }
    }
    // A_i: members i.. with none written yet; B_i: members i.. after at least one (each needs ",").
    const size_t n = props.size();
    std::vector<std::string> a(n + 1), b(n + 1);
    for (size_t i = 0; i <= n; ++i) a[i] = fresh("members"), b[i] = fresh("more_members");
    const Expr comma = Expr::seq({lit(","), rule("ws")});
    if (extra) {
      g_.define(b[n], star(Expr::seq({comma, *extra})));
      g_.define(a[n], opt(Expr::seq({*extra, rule(b[n])})));
    } else {
      g_.define(b[n], Expr::empty());
      g_.define(a[n], Expr::empty());
    }
    for (size_t i = n; i-- > 0;) {
      const Expr& item = props[i].second;
      if (required.count(props[i].first)) {
        g_.define(b[i], Expr::seq({comma, item, rule(b[i + 1])}));
        g_.define(a[i], Expr::seq({item, rule(b[i + 1])}));
      } else {
        g_.define(b[i], Expr::seq({opt(Expr::seq({comma, item})), rule(b[i + 1])}));
        g_.define(a[i], Expr::alt({Expr::seq({item, rule(b[i + 1])}), rule(a[i + 1])}));
      }
    }
    return Expr::seq({lit("{"), rule("ws"), rule(a[0]), lit("}")});
  }

  const json& root_;
  ExprGrammar g_;
  std::map<std::string, std::string> refs_;
  int counter_ = 0;
};

}  // namespace

ExprGrammar compile_json_schema(const std::string& schema_json) {
  json schema;
  try {
    schema = json::parse(schema_json);
  } catch (const json::parse_error& e) {
    throw GrammarError(fmt::format("JSON schema: not valid JSON: {}", e.what()));
  }
  return SchemaCompiler(schema).run();
}

ExprGrammar any_json_object() {
  ExprGrammar g;
  define_json_basics(g);
  g.define("root", rule("json_object"));
  return g;
}

}  // namespace fp4lm::engine::structured
