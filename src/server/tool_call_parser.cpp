#include "server/tool_call_parser.h"

#include <random>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "io/json_file.h"

namespace fp4lm::server {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

std::string random_chars(size_t n, std::string_view alphabet) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s;
  for (size_t i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

std::string_view trim(std::string_view s) {
  const auto ws = [](char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; };
  while (!s.empty() && ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && ws(s.back())) s.remove_suffix(1);
  return s;
}

std::optional<ordered_json> parse_json(std::string_view s) {
  ordered_json v = ordered_json::parse(s.begin(), s.end(), nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) return std::nullopt;
  return v;
}

// The end (one past) of the JSON object or array that starts at `pos` (after whitespace);
// npos while it is not closed yet. Strings and their escapes are skipped, so braces inside
// them do not count.
size_t json_container_end(std::string_view s, size_t pos) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = pos; i < s.size(); ++i) {
    const char c = s[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if (c == '}' || c == ']') {
      if (--depth == 0) return i + 1;
    }
  }
  return std::string_view::npos;
}

// {"name": ..., "arguments" | "parameters": ...} -> a call; nullopt when it is not that shape.
std::optional<ParsedToolCall> call_from_object(const ordered_json& v) {
  if (!v.is_object() || !v.contains("name") || !v["name"].is_string()) return std::nullopt;
  ParsedToolCall c;
  c.name = v["name"].get<std::string>();
  const ordered_json args = v.contains("arguments")    ? v["arguments"]
                            : v.contains("parameters") ? v["parameters"]
                                                       : ordered_json::object();
  c.arguments = python_json_dumps(args);
  return c;
}

SectionStart marker_section(std::string_view text, std::string_view marker) {
  const size_t at = text.find(marker);
  if (at != std::string_view::npos) return {at, true};
  return {text.size() - partial_marker_suffix(text, marker), false};
}

// Tagged blocks OPEN body CLOSE, one call each; text between blocks is ignored. `body_to_call`
// parses one body (nullopt: malformed).
template <typename BodyToCall>
std::optional<std::vector<ParsedToolCall>> tagged_calls(std::string_view section, bool final, std::string_view open,
                                                        std::string_view close, BodyToCall body_to_call) {
  std::vector<ParsedToolCall> calls;
  size_t at = section.find(open);
  while (at != std::string_view::npos) {
    const size_t body = at + open.size();
    const size_t end = section.find(close, body);
    if (end == std::string_view::npos && !final) break;
    const std::string_view text =
        section.substr(body, end == std::string_view::npos ? std::string_view::npos : end - body);
    if (end == std::string_view::npos && trim(text).empty()) break;  // a bare opening tag at the end
    std::optional<ParsedToolCall> c = body_to_call(trim(text));
    if (!c) return std::nullopt;
    calls.push_back(std::move(*c));
    if (end == std::string_view::npos) break;
    at = section.find(open, end + close.size());
  }
  return calls;
}

class HermesParser final : public ToolCallParser {
 public:
  std::string name() const override { return "hermes"; }
  SectionStart find_section(std::string_view text) const override { return marker_section(text, "<tool_call>"); }
  std::optional<std::vector<ParsedToolCall>> complete_calls(std::string_view section, bool final,
                                                            const json&) const override {
    return tagged_calls(section, final, "<tool_call>", "</tool_call>", [](std::string_view body) {
      const std::optional<ordered_json> v = parse_json(body);
      return v ? call_from_object(*v) : std::nullopt;
    });
  }
};

// The JSON type a tool's schema gives parameter `param` of function `fn` ("" when unknown).
std::string schema_type(const json& tools, const std::string& fn, const std::string& param) {
  if (!tools.is_array()) return "";
  for (const json& t : tools) {
    if (!t.is_object() || !t.contains("function") || !t["function"].is_object()) continue;
    const json& f = t["function"];
    if (f.value("name", "") != fn || !f.contains("parameters") || !f["parameters"].is_object()) continue;
    const json& props = f["parameters"].value("properties", json::object());
    if (!props.is_object() || !props.contains(param) || !props[param].is_object()) return "";
    const json& type = props[param].value("type", json());
    return type.is_string() ? type.get<std::string>() : "";
  }
  return "";
}

// A qwen3_coder parameter value as the schema types it; text that does not convert stays a string.
ordered_json typed_value(const std::string& raw, const std::string& type) {
  if (raw == "null") return nullptr;
  if (type == "integer" || type == "int") {
    if (auto v = parse_json(raw); v && v->is_number_integer()) return *v;
  } else if (type == "number" || type == "float") {
    if (auto v = parse_json(raw); v && v->is_number()) return *v;
  } else if (type == "boolean" || type == "bool") {
    if (raw == "true" || raw == "True") return true;
    if (raw == "false" || raw == "False") return false;
  } else if (type == "object" || type == "array") {
    if (auto v = parse_json(raw)) return *v;
  } else if (type.empty()) {
    if (auto v = parse_json(raw); v && !v->is_string()) return *v;
  }
  return raw;
}

class Qwen3CoderParser final : public ToolCallParser {
 public:
  std::string name() const override { return "qwen3_coder"; }
  SectionStart find_section(std::string_view text) const override { return marker_section(text, "<tool_call>"); }
  std::optional<std::vector<ParsedToolCall>> complete_calls(std::string_view section, bool final,
                                                            const json& tools) const override {
    return tagged_calls(section, final, "<tool_call>", "</tool_call>",
                        [&](std::string_view body) { return function_call(body, tools); });
  }

 private:
  static std::optional<ParsedToolCall> function_call(std::string_view body, const json& tools) {
    constexpr std::string_view kFn = "<function=", kParam = "<parameter=", kParamEnd = "</parameter>";
    if (body.substr(0, kFn.size()) != kFn) return std::nullopt;
    const size_t name_end = body.find('>');
    if (name_end == std::string_view::npos) return std::nullopt;
    ParsedToolCall c;
    c.name = std::string(trim(body.substr(kFn.size(), name_end - kFn.size())));
    if (c.name.empty()) return std::nullopt;
    std::string_view rest = body.substr(name_end + 1);
    if (const size_t fn_end = rest.find("</function>"); fn_end != std::string_view::npos) rest = rest.substr(0, fn_end);
    ordered_json args = ordered_json::object();
    for (size_t at = rest.find(kParam); at != std::string_view::npos; at = rest.find(kParam, at)) {
      const size_t pname_end = rest.find('>', at);
      if (pname_end == std::string_view::npos) return std::nullopt;
      const std::string pname(trim(rest.substr(at + kParam.size(), pname_end - at - kParam.size())));
      size_t vend = rest.find(kParamEnd, pname_end);
      const size_t next = rest.find(kParam, pname_end);
      if (vend == std::string_view::npos || (next != std::string_view::npos && next < vend)) vend = next;
      std::string_view value = rest.substr(pname_end + 1, vend == std::string_view::npos ? std::string_view::npos
                                                                                         : vend - pname_end - 1);
      if (!value.empty() && value.front() == '\n') value.remove_prefix(1);
      if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
      args[pname] = typed_value(std::string(value), schema_type(tools, c.name, pname));
      if (vend == std::string_view::npos) break;
      at = vend;
    }
    c.arguments = python_json_dumps(args);
    return c;
  }
};

class Llama3JsonParser final : public ToolCallParser {
 public:
  std::string name() const override { return "llama3_json"; }
  SectionStart find_section(std::string_view text) const override {
    constexpr std::string_view kTag = "<|python_tag|>";
    if (text.substr(0, kTag.size()) == kTag || (!text.empty() && text.front() == '{')) return {0, true};
    if (kTag.substr(0, text.size()) == text) return {0, false};  // empty, or the tag's beginning
    return {text.size(), false};
  }
  std::optional<std::vector<ParsedToolCall>> complete_calls(std::string_view section, bool final,
                                                            const json&) const override {
    constexpr std::string_view kTag = "<|python_tag|>";
    if (section.substr(0, kTag.size()) == kTag) section.remove_prefix(kTag.size());
    std::vector<ParsedToolCall> calls;
    size_t at = 0;
    while (true) {
      while (at < section.size() && (section[at] == ' ' || section[at] == '\n' || section[at] == ';')) ++at;
      if (at >= section.size()) break;
      if (section[at] != '{') return std::nullopt;
      const size_t end = json_container_end(section, at);
      if (end == std::string_view::npos) {
        if (final) return std::nullopt;
        break;
      }
      const std::optional<ordered_json> v = parse_json(section.substr(at, end - at));
      std::optional<ParsedToolCall> c = v ? call_from_object(*v) : std::nullopt;
      if (!c) return std::nullopt;
      calls.push_back(std::move(*c));
      at = end;
    }
    return calls;
  }
};

class MistralParser final : public ToolCallParser {
 public:
  std::string name() const override { return "mistral"; }
  SectionStart find_section(std::string_view text) const override { return marker_section(text, kTag); }
  std::optional<std::vector<ParsedToolCall>> complete_calls(std::string_view section, bool final,
                                                            const json&) const override {
    std::vector<ParsedToolCall> calls;
    size_t at = 0;
    while (true) {
      if (section.substr(at, kTag.size()) == kTag) at += kTag.size();
      while (at < section.size() && (section[at] == ' ' || section[at] == '\n')) ++at;
      if (at >= section.size()) break;
      if (section[at] == '[') {  // a JSON list of {"name", "arguments"}
        const size_t end = json_container_end(section, at);
        if (end == std::string_view::npos) return final ? std::nullopt : std::optional(calls);
        const std::optional<ordered_json> v = parse_json(section.substr(at, end - at));
        if (!v || !v->is_array()) return std::nullopt;
        for (const ordered_json& o : *v) {
          std::optional<ParsedToolCall> c = call_from_object(o);
          if (!c) return std::nullopt;
          calls.push_back(std::move(*c));
        }
        at = end;
        continue;
      }
      const size_t args = section.find(kArgs, at);  // NAME[ARGS]{...}
      if (args == std::string_view::npos) return final ? std::nullopt : std::optional(calls);
      const size_t obj = args + kArgs.size();
      const size_t end = json_container_end(section, obj);
      if (end == std::string_view::npos) return final ? std::nullopt : std::optional(calls);
      const std::optional<ordered_json> v = parse_json(section.substr(obj, end - obj));
      const std::string_view name = trim(section.substr(at, args - at));
      if (!v || name.empty()) return std::nullopt;
      calls.push_back({std::string(name), python_json_dumps(*v)});
      at = end;
    }
    return calls;
  }
  std::string make_id() const override {
    return random_chars(9, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789");
  }

 private:
  static constexpr std::string_view kTag = "[TOOL_CALLS]", kArgs = "[ARGS]";
};

// DeepSeek-V3 / R1: <｜tool▁calls▁begin｜> then per call <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME
// ```json ARGS ```<｜tool▁call▁end｜> (V3.1 drops the "function" type and the code fence:
// <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>ARGS<｜tool▁call▁end｜>), then <｜tool▁calls▁end｜>.
class DeepSeekV3Parser final : public ToolCallParser {
 public:
  std::string name() const override { return "deepseek_v3"; }
  SectionStart find_section(std::string_view text) const override { return marker_section(text, kCalls); }
  std::optional<std::vector<ParsedToolCall>> complete_calls(std::string_view section, bool final,
                                                            const json&) const override {
    return tagged_calls(section, final, kCall, kCallEnd, [](std::string_view body) -> std::optional<ParsedToolCall> {
      const size_t sep = body.find(kSep);
      if (sep == std::string_view::npos) return std::nullopt;
      std::string_view name = trim(body.substr(0, sep)), args = trim(body.substr(sep + kSep.size()));
      if (name == "function") {  // V3: the type, then the name on the next line and a ```json fence
        const size_t nl = args.find('\n');
        if (nl == std::string_view::npos) return std::nullopt;
        name = trim(args.substr(0, nl));
        args = trim(args.substr(nl + 1));
        if (args.starts_with("```json")) args.remove_prefix(7);
        else if (args.starts_with("```")) args.remove_prefix(3);
        if (args.ends_with("```")) args.remove_suffix(3);
        args = trim(args);
      }
      const std::optional<ordered_json> v = parse_json(args);
      if (!v || name.empty()) return std::nullopt;
      return ParsedToolCall{std::string(name), python_json_dumps(*v)};
    });
  }

 private:
  static constexpr std::string_view kCalls = "<｜tool▁calls▁begin｜>", kCall = "<｜tool▁call▁begin｜>",
                                    kCallEnd = "<｜tool▁call▁end｜>", kSep = "<｜tool▁sep｜>";
};

void dump_python(const ordered_json& v, std::string& out) {
  if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [k, x] : v.items()) {
      if (!first) out += ", ";
      first = false;
      io::append_json_string(k, out);
      out += ": ";
      dump_python(x, out);
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out += ", ";
      dump_python(v[i], out);
    }
    out += ']';
  } else if (v.is_string()) {
    io::append_json_string(v.get<std::string>(), out);
  } else {
    out += v.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  }
}

}  // namespace

std::string make_tool_call_id() { return "chatcmpl-tool-" + random_chars(32, "0123456789abcdef"); }

std::string ToolCallParser::make_id() const { return make_tool_call_id(); }

// gpt-oss's tool calls are harmony messages: ChatOutputParser hands the whole output to
// HarmonyParser when this parser is chosen, so the section interface only says "no section".
class HarmonyToolCalls final : public ToolCallParser {
 public:
  std::string name() const override { return "openai"; }
  SectionStart find_section(std::string_view text) const override { return {text.size(), false}; }
  std::optional<std::vector<ParsedToolCall>> complete_calls(std::string_view, bool, const json&) const override {
    return std::vector<ParsedToolCall>{};
  }
};

std::vector<std::string> tool_call_parser_names() {
  return {"deepseek_v3", "hermes", "llama3_json", "mistral", "openai", "qwen3_coder"};
}

std::unique_ptr<ToolCallParser> make_tool_call_parser(const std::string& name) {
  if (name == "hermes") return std::make_unique<HermesParser>();
  if (name == "qwen3_coder") return std::make_unique<Qwen3CoderParser>();
  if (name == "llama3_json") return std::make_unique<Llama3JsonParser>();
  if (name == "mistral") return std::make_unique<MistralParser>();
  if (name == "deepseek_v3") return std::make_unique<DeepSeekV3Parser>();
  if (name == "openai") return std::make_unique<HarmonyToolCalls>();
  throw UsageError(fmt::format("unknown tool-call parser '{}' (known: {})", name, fmt::join(tool_call_parser_names(), ", ")));
}

std::string python_json_dumps(const ordered_json& value) {
  std::string out;
  dump_python(value, out);
  return out;
}

size_t partial_marker_suffix(std::string_view text, std::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  return 0;
}

}  // namespace fp4lm::server
