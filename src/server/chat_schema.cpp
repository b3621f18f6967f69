#include "server/chat_schema.h"

#include <algorithm>
#include <array>
#include <string_view>

#include <fmt/format.h>

#include "core/error.h"
#include "io/json_file.h"
#include "server/api_error.h"
#include "server/request_fields.h"

namespace fp4lm::server {

using nlohmann::json;

namespace {

// Variables the renderer (or Hugging Face's apply_chat_template) sets itself.
constexpr std::array<std::string_view, 11> kReservedTemplateVars = {
    "messages", "tools",    "documents",       "add_generation_prompt", "continue_final_message", "bos_token",
    "eos_token", "chat_template", "tokenize", "raise_exception", "strftime_now"};

void require_object(const json& v, const std::string& name) {
  if (!v.is_object()) throw bad_request(fmt::format("'{}' must be an object", name), name);
}

// One image part ({"type": "image_url", "image_url": {"url": ...}}, or vLLM's untyped
// {"image_url": "..."} / {"image_url": {"url": ...}}): its URL, checked for shape only.
ImagePart image_part(const json& part, const std::string& name, bool typed) {
  if (present(part, "uuid"))
    throw bad_request(fmt::format("'{}.uuid': media UUIDs are not supported; send the image itself", name),
                      name + ".uuid");
  const std::string field = name + ".image_url";
  if (!present(part, "image_url"))
    throw bad_request(fmt::format("'{}' is required (an object {{\"url\": ...}})", field), field);
  const json& iu = part["image_url"];
  if (!typed && iu.is_string()) return {iu.get<std::string>(), field};
  // OpenAI's type (which vLLM validates): an object with a string url and an optional detail.
  if (!iu.is_object())
    throw bad_request(fmt::format("'{}' must be an object {{\"url\": \"data:image/...;base64,...\"}}", field), field);
  const std::optional<std::string> url = opt_string(iu, "url", field + ".url");
  if (!url) throw bad_request(fmt::format("'{}.url' is required (a string)", field), field + ".url");
  // fp4lm, like vLLM, gives every image the model's own resolution; a request for another is
  // refused rather than ignored.
  if (const auto detail = opt_string(iu, "detail", field + ".detail"); detail && *detail != "auto")
    throw bad_request(fmt::format("'{}.detail': only \"auto\" is supported (images run at the model's own "
                                  "resolution), got \"{}\"",
                                  field, *detail),
                      field + ".detail");
  return {*url, field + ".url"};
}

// A message's content as the template sees it: a string (text parts joined with newlines) when
// it has no image, else the list of {"type": "text", "text"} and {"type": "image"} parts in
// order (as vLLM and transformers hand image parts to templates). Image parts go to `images`.
json checked_content(const json& msg, const std::string& where, std::vector<ImagePart>& images) {
  if (!present(msg, "content")) return "";
  const json& c = msg["content"];
  if (c.is_string()) return c.get<std::string>();
  const std::string field = where + ".content";
  if (!c.is_array()) throw bad_request(fmt::format("'{}' must be a string or a list of parts", field), field);
  std::string text;
  json parts = json::array();
  bool has_image = false;
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string part = fmt::format("{}[{}]", field, i);
    require_object(c[i], part);
    const std::optional<std::string> type = opt_string(c[i], "type", part + ".type");
    if (type == "image_url" || (!type && present(c[i], "image_url"))) {
      images.push_back(image_part(c[i], part, type.has_value()));
      parts.push_back({{"type", "image"}});
      has_image = true;
      continue;
    }
    if (type == "video_url" || (!type && present(c[i], "video_url")))
      throw bad_request(fmt::format("'{}': video_url parts are not supported: the server decodes no video files and "
                                    "accepts text and image parts only; video is taken as frames through fp4lm.LLM "
                                    "(Qwen3-VL / Qwen3.5: multi_modal_data={{\"video\": [frame, ...]}})",
                                    part),
                        part + ".type");
    if (type != "text")
      throw bad_request(fmt::format("'{}.type': only text parts ({{\"type\": \"text\", \"text\": ...}}) and "
                                    "image parts ({{\"type\": \"image_url\", \"image_url\": {{\"url\": ...}}}}) "
                                    "are supported",
                                    part),
                        part + ".type");
    const std::optional<std::string> t = opt_string(c[i], "text", part + ".text");
    if (!t) throw bad_request(fmt::format("'{}.text' is required (a string)", part), part + ".text");
    if (!text.empty()) text += "\n";
    text += *t;
    parts.push_back({{"type", "text"}, {"text", *t}});
  }
  return has_image ? parts : json(text);
}

void check_function_call(const json& fn, const std::string& name, bool arguments) {
  require_object(fn, name);
  if (!opt_string(fn, "name", name + ".name")) throw bad_request(fmt::format("'{}.name' is required", name), name + ".name");
  if (arguments && !opt_string(fn, "arguments", name + ".arguments"))
    throw bad_request(fmt::format("'{}.arguments' is required (a JSON string)", name), name + ".arguments");
}

void check_tool_calls(const json& msg, const std::string& where) {
  if (!present(msg, "tool_calls")) return;
  const std::string field = where + ".tool_calls";
  if (!msg["tool_calls"].is_array()) throw bad_request(fmt::format("'{}' must be a list", field), field);
  for (size_t i = 0; i < msg["tool_calls"].size(); ++i) {
    const json& call = msg["tool_calls"][i];
    const std::string name = fmt::format("{}[{}]", field, i);
    require_object(call, name);
    opt_string(call, "id", name + ".id");
    if (opt_string(call, "type", name + ".type").value_or("function") != "function")
      throw bad_request(fmt::format("'{}.type' must be \"function\"", name), name + ".type");
    if (!present(call, "function")) throw bad_request(fmt::format("'{}.function' is required", name), name + ".function");
    check_function_call(call["function"], name + ".function", /*arguments=*/true);
  }
}

void check_tools(const json& b) {
  if (!present(b, "tools")) return;
  const json& tools = b["tools"];
  if (!tools.is_array()) throw bad_request("'tools' must be a list of tools", "tools");
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string name = fmt::format("tools[{}]", i);
    require_object(tools[i], name);
    if (opt_string(tools[i], "type", name + ".type").value_or("") != "function")
      throw bad_request(fmt::format("'{}.type' must be \"function\"", name), name + ".type");
    const std::string fn = name + ".function";
    if (!present(tools[i], "function")) throw bad_request(fmt::format("'{}' is required", fn), fn);
    const json& f = tools[i]["function"];
    check_function_call(f, fn, /*arguments=*/false);
    opt_string(f, "description", fn + ".description");
    opt_bool(f, "strict", fn + ".strict");
    if (present(f, "parameters")) require_object(f["parameters"], fn + ".parameters");
  }
}

void check_tool_choice(const json& b) {
  if (!present(b, "tool_choice")) return;
  const json& tc = b["tool_choice"];
  if (tc.is_string()) {
    const std::string v = tc.get<std::string>();
    if (v != "none" && v != "auto" && v != "required")
      throw bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or a named function", "tool_choice");
    if (v != "none" && !present(b, "tools"))
      throw bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice");
    return;
  }
  require_object(tc, "tool_choice");
  if (opt_string(tc, "type", "tool_choice.type").value_or("") != "function")
    throw bad_request("'tool_choice.type' must be \"function\"", "tool_choice.type");
  if (!present(tc, "function")) throw bad_request("'tool_choice.function' is required", "tool_choice.function");
  check_function_call(tc["function"], "tool_choice.function", /*arguments=*/false);
  if (!present(b, "tools")) throw bad_request("When using `tool_choice`, `tools` must be set.", "tool_choice");
}

// vLLM's treatment of an assistant's tool-call arguments: a JSON string becomes the value it
// encodes, absent or empty becomes {}.
template <typename Json>
void parse_arguments(Json& msg, const std::string& where) {
  if (!msg.contains("tool_calls") || !msg["tool_calls"].is_array()) return;
  for (size_t i = 0; i < msg["tool_calls"].size(); ++i) {
    Json& fn = msg["tool_calls"][i]["function"];
    if (!fn.contains("arguments") || fn["arguments"].is_null() ||
        (fn["arguments"].is_string() && fn["arguments"].template get<std::string>().empty())) {
      fn["arguments"] = Json::object();
      continue;
    }
    if (!fn["arguments"].is_string()) continue;
    const std::string field = fmt::format("{}.tool_calls[{}].function.arguments", where, i);
    try {  // depth-bounded, as every JSON we read
      fn["arguments"] = Json(io::parse_ordered_json(fn["arguments"].template get<std::string>(), field));
    } catch (const Error& e) {
      throw bad_request(e.what(), field);
    }
  }
}

}  // namespace

json checked_messages(const json& b, std::vector<ImagePart>* images) {
  std::vector<ImagePart> found;
  if (!present(b, "messages") || !b["messages"].is_array() || b["messages"].empty())
    throw bad_request("'messages' must be a non-empty list of messages", "messages");
  json messages = json::array();
  for (size_t i = 0; i < b["messages"].size(); ++i) {
    const json& msg = b["messages"][i];
    const std::string where = fmt::format("messages[{}]", i);
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      throw bad_request(fmt::format("'{}' must be an object with a string 'role'", where), where);
    opt_string(msg, "name", where + ".name");
    opt_string(msg, "tool_call_id", where + ".tool_call_id");
    check_tool_calls(msg, where);
    json copy = msg;
    copy["content"] = checked_content(msg, where, found);
    parse_arguments(copy, where);
    messages.push_back(std::move(copy));
  }
  if (images) *images = std::move(found);
  else if (!found.empty())
    throw bad_request(fmt::format("'{}': image parts are not accepted on this endpoint", found[0].field), found[0].field);
  return messages;
}

nlohmann::ordered_json ordered_messages(const json& checked, const nlohmann::ordered_json& raw) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (size_t i = 0; i < checked.size(); ++i) {
    nlohmann::ordered_json m = raw[i];
    m["content"] = nlohmann::ordered_json(checked[i]["content"]);
    parse_arguments(m, fmt::format("messages[{}]", i));
    out.push_back(std::move(m));
  }
  return out;
}

tokenizer::ChatOptions checked_template_options(const json& b) {
  tokenizer::ChatOptions co;
  co.add_generation_prompt = opt_bool(b, "add_generation_prompt").value_or(true);
  check_tools(b);
  check_tool_choice(b);
  if (present(b, "tools")) co.tools = b["tools"];
  // documents (RAG) reach templates that use them, as vLLM passes them.
  if (present(b, "documents")) {
    const json& docs = b["documents"];
    if (!docs.is_array()) throw bad_request("'documents' must be a list of objects", "documents");
    for (size_t i = 0; i < docs.size(); ++i) require_object(docs[i], fmt::format("documents[{}]", i));
    co.extra["documents"] = docs;
  }
  // reasoning_effort: a template variable, and thinking on unless it is "none" (vLLM).
  if (const auto effort = opt_string(b, "reasoning_effort")) {
    static const std::array<std::string_view, 7> kEfforts = {"none", "minimal", "low", "medium", "high", "xhigh", "max"};
    if (std::find(kEfforts.begin(), kEfforts.end(), *effort) == kEfforts.end())
      throw bad_request(fmt::format("'reasoning_effort' must be one of none, minimal, low, medium, high, xhigh, max; "
                                    "got '{}'",
                                    *effort),
                        "reasoning_effort");
    co.extra["reasoning_effort"] = *effort;
    co.enable_thinking = *effort != "none";
  }
  if (!present(b, "chat_template_kwargs")) return co;
  const json& kw = b["chat_template_kwargs"];
  require_object(kw, "chat_template_kwargs");
  for (const auto& [k, v] : kw.items()) {
    const std::string name = "chat_template_kwargs." + k;
    for (std::string_view r : kReservedTemplateVars)
      if (k == r)
        throw bad_request(fmt::format("'{}': '{}' is set by the server and cannot be replaced", name, k), name);
    if (k == "enable_thinking") co.enable_thinking = opt_bool(kw, "enable_thinking", name);
    else co.extra[k] = v;
  }
  return co;
}

}  // namespace fp4lm::server
