#include "server/tool_choice_spec.h"

#include <fmt/format.h>

#include "server/api_error.h"

namespace fp4lm::server {

using nlohmann::json;
using engine::structured::StructuredSpec;

namespace {
json parameters_of(const json& function) {
  if (function.contains("parameters") && function["parameters"].is_object()) return function["parameters"];
  return json{{"type", "object"}, {"properties", json::object()}};
}
}  // namespace

StructuredSpec tool_choice_spec(const json& b) {
  if (!b.contains("tool_choice") || b["tool_choice"].is_null()) return {};
  const json& tc = b["tool_choice"];
  if (tc.is_string() && tc.get<std::string>() != "required") return {};
  const json tools = b.value("tools", json::array());
  StructuredSpec s;
  s.kind = StructuredSpec::Kind::JsonSchema;
  s.param = "tool_choice";
  if (tc.is_object()) {
    const std::string name = tc["function"]["name"].get<std::string>();
    for (const json& t : tools)
      if (t.contains("function") && t["function"].value("name", "") == name) {
        s.text = parameters_of(t["function"]).dump();
        return s;
      }
    throw bad_request(fmt::format("tool_choice names function '{}', which is not in 'tools'", name),
                      "tool_choice.function.name");
  }
  json alts = json::array();
  for (const json& t : tools) {
    if (!t.contains("function")) continue;
    const json& f = t["function"];
    alts.push_back({{"type", "object"},
                    {"properties", {{"name", {{"type", "string"}, {"enum", {f.value("name", "")}}}},
                                    {"parameters", parameters_of(f)}}},
                    {"required", {"name", "parameters"}}});
  }
  if (alts.empty()) throw bad_request("tool_choice 'required' needs at least one function in 'tools'", "tools");
  s.text = json{{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", alts}}}}.dump();
  return s;
}

}  // namespace fp4lm::server
