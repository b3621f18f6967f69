#include "server/openai_response.h"

#include <algorithm>

namespace fp4lm::server {

using nlohmann::json;

ResponseBuilder::ResponseBuilder(const ApiRequest& req, const ServingModel& m, std::string id, int64_t created)
    : req_(req), m_(m), id_(std::move(id)), created_(created),
      prompt_tokens_(static_cast<int64_t>(req.params.prompt.size())) {}

std::string ResponseBuilder::token_text(int32_t id) const {
  if (!m_.tok) return "token_id:" + std::to_string(id);
  return m_.tok->decode({id}, false);
}

json ResponseBuilder::usage() const {
  // prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache supplied (OpenAI's
  // and vLLM's field).
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens_ + completion_tokens_},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
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
  cached_tokens_ = std::max(cached_tokens_, out.cached_tokens);
  const bool has_ids = !out.token_ids.empty() && (req_.return_token_ids || req_.logprobs);
  if (text.empty() && !out.finished && !has_ids) return chunks;

  json choice = {{"index", 0}};
  if (chat) choice["delta"] = json{{"content", text}};
  else choice["text"] = text;
  choice["logprobs"] = req_.logprobs && !out.logprobs.empty() ? logprobs_json(out.logprobs, text_.size()) : json(nullptr);
  choice["finish_reason"] = out.finished ? json(out.finish_reason) : json(nullptr);
  if (out.finished) {
    choice["stop_reason"] = out.stop_reason ? json(*out.stop_reason)
                            : out.stop_token ? json(*out.stop_token)
                                             : json(nullptr);
  }
  if (req_.return_token_ids) choice["token_ids"] = out.token_ids;
  text_ += text;
  json c = chunk_base();
  c["choices"] = json::array({choice});
  chunks.push_back(std::move(c));
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
  cached_tokens_ = std::max(cached_tokens_, out.cached_tokens);
  if (out.finished) {
    finish_reason_ = out.finish_reason;
    stop_reason_ = out.stop_reason ? json(*out.stop_reason) : out.stop_token ? json(*out.stop_token) : json(nullptr);
  }
}

json ResponseBuilder::response() const {
  const bool chat = req_.endpoint == Endpoint::chat;
  json choice = {{"index", 0}};
  const size_t echo_len = !chat && req_.echo ? req_.prompt_text.size() : 0;
  if (chat) choice["message"] = {{"role", "assistant"}, {"content", text_}};
  else choice["text"] = (echo_len ? req_.prompt_text : std::string()) + text_;
  choice["logprobs"] = req_.logprobs ? logprobs_json(logprobs_, echo_len) : json(nullptr);
  choice["finish_reason"] = finish_reason_;
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
