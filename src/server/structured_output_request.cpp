#include "server/structured_output_request.h"

#include <fmt/format.h>

#include "server/api_error.h"

namespace fp4lm::server {

using nlohmann::json;
using engine::structured::StructuredSpec;

namespace {

bool present(const json& b, const char* key) { return b.contains(key) && !b[key].is_null(); }

// A schema given as an object or as JSON text.
std::string schema_text(const json& v, const std::string& field) {
  if (v.is_object() || v.is_boolean()) return v.dump();
  if (v.is_string()) {
    try {
      return json::parse(v.get<std::string>()).dump();
    } catch (const json::parse_error&) {
      throw bad_request(fmt::format("'{}' is a string that is not valid JSON", field), field);
    }
  }
  throw bad_request(fmt::format("'{}' must be a JSON schema (an object)", field), field);
}

std::string string_field(const json& v, const std::string& field) {
  if (!v.is_string() || v.get<std::string>().empty())
    throw bad_request(fmt::format("'{}' must be a non-empty string", field), field);
  return v.get<std::string>();
}

std::vector<std::string> choice_list(const json& v, const std::string& field) {
  if (!v.is_array() || v.empty()) throw bad_request(fmt::format("'{}' must be a non-empty list of strings", field), field);
  std::vector<std::string> out;
  for (const json& x : v) {
    if (!x.is_string()) throw bad_request(fmt::format("'{}' must be a non-empty list of strings", field), field);
    out.push_back(x.get<std::string>());
  }
  return out;
}

StructuredSpec from_response_format(const json& rf) {
  if (!rf.is_object() || !present(rf, "type"))
    throw bad_request("'response_format' must be an object with a string 'type'", "response_format");
  if (!rf["type"].is_string())
    throw bad_request(fmt::format("'response_format.type' must be a string, got {}", rf["type"].dump()),
                      "response_format.type");
  const std::string type = rf["type"].get<std::string>();
  StructuredSpec s;
  s.param = "response_format";
  if (type == "text") return s;
  if (type == "json_object") {
    s.kind = StructuredSpec::Kind::JsonObject;
    return s;
  }
  if (type == "json_schema") {
    if (!present(rf, "json_schema") || !rf["json_schema"].is_object())
      throw bad_request("response_format type 'json_schema' needs a 'json_schema' object", "response_format.json_schema");
    const json& js = rf["json_schema"];
    if (present(js, "strict") && !js["strict"].is_boolean())
      throw bad_request("'response_format.json_schema.strict' must be a boolean", "response_format.json_schema.strict");
    if (!present(js, "schema"))
      throw bad_request("'response_format.json_schema.schema' is required", "response_format.json_schema.schema");
    s.kind = StructuredSpec::Kind::JsonSchema;
    s.text = schema_text(js["schema"], "response_format.json_schema.schema");
    return s;
  }
  throw bad_request(fmt::format("response_format type '{}' is not supported (text, json_object or json_schema)", type),
                    "response_format.type");
}

StructuredSpec from_structured_outputs(const json& so) {
  if (!so.is_object()) throw bad_request("'structured_outputs' must be an object", "structured_outputs");
  StructuredSpec s;
  int kinds = 0;
  for (const auto& [key, v] : so.items()) {
    if (v.is_null()) continue;
    const std::string field = "structured_outputs." + key;
    if (key == "json") {
      s.kind = StructuredSpec::Kind::JsonSchema;
      s.text = schema_text(v, field);
    } else if (key == "regex") {
      s.kind = StructuredSpec::Kind::Regex;
      s.text = string_field(v, field);
    } else if (key == "choice") {
      s.kind = StructuredSpec::Kind::Choice;
      s.choices = choice_list(v, field);
    } else if (key == "grammar") {
      s.kind = StructuredSpec::Kind::Grammar;
      s.text = string_field(v, field);
    } else if (key == "disable_any_whitespace" || key == "disable_additional_properties" ||
               key == "disable_fallback") {
      if (!v.is_boolean()) throw bad_request(fmt::format("'{}' must be a boolean", field), field);
      continue;  // options, not constraints (json_whitespace reads the first)
    } else if (key == "whitespace_pattern") {
      throw bad_request("'structured_outputs.whitespace_pattern' is not supported; use disable_any_whitespace", field);
    } else if (key == "json_object") {
      if (!v.is_boolean()) throw bad_request(fmt::format("'{}' must be a boolean", field), field);
      if (!v.get<bool>()) continue;
      s.kind = StructuredSpec::Kind::JsonObject;
    } else {
      throw bad_request(fmt::format("'{}' is not supported (json, regex, choice, grammar or json_object; options "
                                    "disable_any_whitespace, disable_additional_properties, disable_fallback)",
                                    field),
                        field);
    }
    s.param = field;
    ++kinds;
  }
  if (kinds > 1)
    throw bad_request("'structured_outputs' may set only one of json, regex, choice, grammar, json_object",
                      "structured_outputs");
  return s;
}

}  // namespace

StructuredSpec parse_structured_outputs(const json& b) {
  std::vector<StructuredSpec> specs;
  if (present(b, "response_format")) specs.push_back(from_response_format(b["response_format"]));
  if (present(b, "structured_outputs")) specs.push_back(from_structured_outputs(b["structured_outputs"]));
  if (present(b, "guided_json"))
    specs.push_back({StructuredSpec::Kind::JsonSchema, schema_text(b["guided_json"], "guided_json"), {}, "guided_json"});
  if (present(b, "guided_regex"))
    specs.push_back({StructuredSpec::Kind::Regex, string_field(b["guided_regex"], "guided_regex"), {}, "guided_regex"});
  if (present(b, "guided_choice"))
    specs.push_back({StructuredSpec::Kind::Choice, "", choice_list(b["guided_choice"], "guided_choice"), "guided_choice"});
  if (present(b, "guided_grammar"))
    specs.push_back({StructuredSpec::Kind::Grammar, string_field(b["guided_grammar"], "guided_grammar"), {}, "guided_grammar"});
  std::erase_if(specs, [](const StructuredSpec& s) { return !s.active(); });
  if (specs.size() > 1)
    throw bad_request(fmt::format("only one structured-output constraint per request ('{}' and '{}' both given)",
                                  specs[0].param, specs[1].param),
                      specs[1].param);
  return specs.empty() ? StructuredSpec{} : specs[0];
}

engine::structured::JsonWhitespace json_whitespace(const json& b, const engine::structured::JsonWhitespace& server_default) {
  engine::structured::JsonWhitespace w = server_default;
  if (present(b, "structured_outputs") && b["structured_outputs"].is_object()) {
    const json& so = b["structured_outputs"];
    if (present(so, "disable_any_whitespace")) {
      if (!so["disable_any_whitespace"].is_boolean())
        throw bad_request("'structured_outputs.disable_any_whitespace' must be a boolean",
                          "structured_outputs.disable_any_whitespace");
      w.compact = so["disable_any_whitespace"].get<bool>();
    }
  }
  return w;
}

}  // namespace fp4lm::server
