#include "server/openai_response.h"

#include <algorithm>

#include "server/tool_call_parser.h"

namespace fp4lm::server {

using nlohmann::json;
using TC = ApiRequest::ToolChoice;

ResponseBuilder::ResponseBuilder(const ApiRequest& req, const ServingModel& m, std::string id, int64_t created)
    : req_(req), m_(m), id_(std::move(id)), created_(created),
      prompt_tokens_(static_cast<int64_t>(req.params.prompt.size())) {
  if (parses_output())
    parser_ = std::make_unique<ChatOutputParser>(m_.reasoning, req_.tool_choice == TC::auto_calls ? m_.tool_parser : nullptr,
                                                 &req_.tools);
}

// Chat text goes through the reasoning / tool-call parsers (otherwise it is all content).
bool ResponseBuilder::parses_output() const {
  if (req_.endpoint != Endpoint::chat) return false;
  if (req_.tool_choice == TC::required || req_.tool_choice == TC::named) return false;
  return m_.reasoning != ReasoningKind::none || (req_.tool_choice == TC::auto_calls && m_.tool_parser);
}

// tool_choice "required": the output is a JSON list of {"name", "parameters"} (the constraint
// makes it so unless the length limit cut it; then there are no calls).
std::vector<ToolCallDelta> ResponseBuilder::required_calls(const std::string& text) const {
  std::vector<ToolCallDelta> calls;
  const auto v = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded() || !v.is_array()) return calls;
  for (const auto& c : v) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) return {};
    calls.push_back({calls.size(), make_tool_call_id(), c["name"].get<std::string>(),
                     python_json_dumps(c.contains("parameters") ? c["parameters"] : nlohmann::ordered_json::object())});
  }
  return calls;
}

ChatDelta ResponseBuilder::chat_delta(const std::string& text, bool last) {
  ChatDelta d;
  if (req_.tool_choice == TC::named) {
    if (!text.empty()) {
      ToolCallDelta t{0, "", "", text};
      if (named_id_.empty()) {
        named_id_ = make_tool_call_id();
        t.id = named_id_;
        t.name = req_.named_tool;
      }
      d.tool_calls.push_back(std::move(t));
    }
  } else if (req_.tool_choice == TC::required) {
    tool_text_ += text;
    if (last) d.tool_calls = required_calls(tool_text_);
  } else if (parser_) {
    d = parser_->feed(text);
    if (last) {
      ChatDelta rest = parser_->finish();
      d.reasoning += rest.reasoning;
      d.content += rest.content;
      for (auto& t : rest.tool_calls) d.tool_calls.push_back(std::move(t));
    }
  } else {
    d.content = text;
  }
  if (!req_.include_reasoning) d.reasoning.clear();
  if (!req_.parallel_tool_calls) std::erase_if(d.tool_calls, [](const ToolCallDelta& t) { return t.index > 0; });
  tool_calls_ += static_cast<size_t>(std::count_if(d.tool_calls.begin(), d.tool_calls.end(),
                                                   [](const ToolCallDelta& t) { return !t.name.empty(); }));
  return d;
}

// The deltas of one chat output, one per chunk as vLLM sends them: reasoning / content first,
// then each tool call's opening (id, type, name) and its arguments.
std::vector<json> ResponseBuilder::chat_stream_deltas(const ChatDelta& d, bool last) {
  std::vector<json> deltas;
  const bool plain = !parser_ && req_.tool_choice != TC::named && req_.tool_choice != TC::required;
  if (plain) {
    deltas.push_back({{"content", d.content}});
    return deltas;
  }
  if (!d.content.empty() || !d.reasoning.empty()) {
    json x = json::object();
    if (!d.reasoning.empty()) {
      x["reasoning_content"] = d.reasoning;
      x["reasoning"] = d.reasoning;
    }
    if (!d.content.empty()) x["content"] = d.content;
    deltas.push_back(std::move(x));
  }
  for (const ToolCallDelta& t : d.tool_calls) {
    if (!t.name.empty()) {
      deltas.push_back({{"tool_calls", json::array({{{"index", t.index},
                                                     {"id", t.id},
                                                     {"type", "function"},
                                                     {"function", {{"name", t.name}}}}})}});
    }
    if (!t.arguments.empty())
      deltas.push_back({{"tool_calls", json::array({{{"index", t.index}, {"function", {{"arguments", t.arguments}}}}})}});
  }
  if (deltas.empty() && last) deltas.push_back({{"content", ""}});
  return deltas;
}

std::string ResponseBuilder::chat_finish_reason(const std::string& engine_reason) const {
  const bool called = tool_calls_ > 0;
  if (called && req_.tool_choice == TC::auto_calls) return "tool_calls";
  if (req_.tool_choice == TC::required && engine_reason == "stop") return "tool_calls";
  return engine_reason;
}

std::string ResponseBuilder::token_text(int32_t id) const {
  if (!m_.tok) return "token_id:" + std::to_string(id);
  return m_.tok->decode({id}, false);
}

json ResponseBuilder::usage() const {
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens_ + completion_tokens_}};
}

json ResponseBuilder::logprobs_json(const std::vector<engine::TokenLogprob>& lps, size_t text_offset) const {
  auto bytes_of = [](const std::string& s) {
    json b = json::array();
    for (unsigned char c : s) b.push_back(static_cast<int>(c));
    return b;
  };
  if (req_.endpoint == Endpoint::chat) {
    json content = json::array();
    for (const auto& lp : lps) {
      const std::string t = token_text(lp.id);
      json top = json::array();
      for (const auto& [id, v] : lp.top) {
        const std::string tt = token_text(id);
        top.push_back({{"token", tt}, {"logprob", v}, {"bytes", bytes_of(tt)}});
      }
      content.push_back({{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  size_t off = text_offset;
  for (const auto& lp : lps) {
    const std::string t = token_text(lp.id);
    tokens.push_back(t);
    token_logprobs.push_back(lp.logprob);
    json d = json::object();
    for (const auto& [id, v] : lp.top) d[token_text(id)] = v;
    top.push_back(d);
    offsets.push_back(off);
    off += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json ResponseBuilder::chunk_base() const {
  json c = {{"id", id_},
            {"object", req_.endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", m_.name}};
  if (req_.include_usage) c["usage"] = nullptr;
  return c;
}

std::vector<json> ResponseBuilder::stream_chunks(const engine::RequestOutput& out) {
  std::vector<json> chunks;
  const bool chat = req_.endpoint == Endpoint::chat;
  std::string text = out.text;
  if (!started_) {
    started_ = true;
    if (chat) {
      json c = chunk_base();
      c["choices"] = json::array({{{"index", 0},
                                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}});
      chunks.push_back(std::move(c));
    } else if (req_.echo) {
      text = req_.prompt_text + text;
    }
  }
  completion_tokens_ = out.completion_tokens > 0 ? out.completion_tokens : completion_tokens_;
  const bool has_ids = !out.token_ids.empty() && (req_.return_token_ids || req_.logprobs);
  if (text.empty() && !out.finished && !has_ids) return chunks;

  std::vector<json> deltas;
  if (chat) {
    const bool last = out.finished && out.finish_reason != "error";
    deltas = chat_stream_deltas(chat_delta(text, last), out.finished);
    if (deltas.empty()) {
      if (!has_ids) return chunks;
      deltas.push_back({{"content", ""}});
    }
  } else {
    deltas.push_back(nullptr);
  }
  for (size_t i = 0; i < deltas.size(); ++i) {
    const bool first = i == 0, final_chunk = i + 1 == deltas.size();
    json choice = {{"index", 0}};
    if (chat) choice["delta"] = deltas[i];
    else choice["text"] = text;
    choice["logprobs"] = first && req_.logprobs && !out.logprobs.empty() ? logprobs_json(out.logprobs, text_.size())
                                                                          : json(nullptr);
    const bool finishing = out.finished && final_chunk;
    choice["finish_reason"] =
        finishing ? json(chat ? chat_finish_reason(out.finish_reason) : out.finish_reason) : json(nullptr);
    if (finishing) {
      choice["stop_reason"] = out.stop_reason ? json(*out.stop_reason)
                              : out.stop_token ? json(*out.stop_token)
                                               : json(nullptr);
    }
    if (req_.return_token_ids) choice["token_ids"] = first ? json(out.token_ids) : json::array();
    json c = chunk_base();
    c["choices"] = json::array({choice});
    chunks.push_back(std::move(c));
  }
  text_ += text;
  return chunks;
}

json ResponseBuilder::usage_chunk() const {
  json c = chunk_base();
  c["choices"] = json::array();
  c["usage"] = usage();
  return c;
}

void ResponseBuilder::add(const engine::RequestOutput& out) {
  text_ += out.text;
  ids_.insert(ids_.end(), out.token_ids.begin(), out.token_ids.end());
  logprobs_.insert(logprobs_.end(), out.logprobs.begin(), out.logprobs.end());
  if (out.completion_tokens > 0) completion_tokens_ = out.completion_tokens;
  if (out.finished) {
    finish_reason_ = out.finish_reason;
    stop_reason_ = out.stop_reason ? json(*out.stop_reason) : out.stop_token ? json(*out.stop_token) : json(nullptr);
  }
}

// The whole chat message: the same parsers over the whole text, so it equals the streamed deltas.
json ResponseBuilder::chat_message(std::string& finish_reason) const {
  json msg = {{"role", "assistant"}, {"content", text_}};
  if (req_.tool_choice == TC::none && m_.reasoning == ReasoningKind::none) return msg;
  ResponseBuilder whole(req_, m_, id_, created_);
  const ChatDelta d = whole.chat_delta(text_, true);
  finish_reason = whole.chat_finish_reason(finish_reason_);
  json calls = json::array();
  for (const ToolCallDelta& t : d.tool_calls)
    calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
  const bool forced = req_.tool_choice == TC::named || req_.tool_choice == TC::required;
  msg["content"] = !d.content.empty() ? json(d.content) : forced ? json("") : calls.empty() ? json("") : json(nullptr);
  if (m_.reasoning != ReasoningKind::none) {
    msg["reasoning_content"] = d.reasoning.empty() ? json(nullptr) : json(d.reasoning);
    msg["reasoning"] = msg["reasoning_content"];
  }
  msg["tool_calls"] = calls;
  return msg;
}

json ResponseBuilder::response() const {
  const bool chat = req_.endpoint == Endpoint::chat;
  json choice = {{"index", 0}};
  const size_t echo_len = !chat && req_.echo ? req_.prompt_text.size() : 0;
  std::string finish_reason = finish_reason_;
  if (chat) choice["message"] = chat_message(finish_reason);
  else choice["text"] = (echo_len ? req_.prompt_text : std::string()) + text_;
  choice["logprobs"] = req_.logprobs ? logprobs_json(logprobs_, echo_len) : json(nullptr);
  choice["finish_reason"] = finish_reason;
  choice["stop_reason"] = stop_reason_;
  if (req_.return_token_ids) choice["token_ids"] = ids_;
  return {{"id", id_},
          {"object", chat ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", m_.name},
          {"choices", json::array({choice})},
          {"usage", usage()}};
}

}  // namespace fp4lm::server
