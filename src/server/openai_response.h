#pragma once
// Engine outputs -> OpenAI/vLLM response objects: whole responses (text_completion,
// chat.completion) and stream chunks (text_completion, chat.completion.chunk), with exact usage
// and logprobs in each endpoint's format. One request may have several choices (`n`, and on
// /v1/completions a list of prompts), each fed by its own engine request. Candidate c answers
// prompt c / best_of; with best_of > n (never streamed) the response keeps each prompt's n
// candidates of the highest cumulative logprob.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/request.h"
#include "server/chat_output_parser.h"
#include "server/openai_request.h"
#include "server/serving_model.h"

namespace fp4lm::server {

class ResponseBuilder {
 public:
  // `id`: "cmpl-..." or "chatcmpl-..."; `created`: Unix seconds.
  ResponseBuilder(const ApiRequest& req, const ServingModel& m, std::string id, int64_t created);
  ~ResponseBuilder();

  size_t choices() const { return choices_.size(); }
  // Streaming (best_of == n): the chunks one engine output of choice `c` becomes (none when it carries nothing
  // to show). A choice's first call also yields the chat role chunk / the completions echo.
  std::vector<nlohmann::json> stream_chunks(size_t c, const engine::RequestOutput& out);
  std::vector<nlohmann::json> stream_chunks(const engine::RequestOutput& out) { return stream_chunks(0, out); }
  // The usage-only chunk sent last when stream_options.include_usage is set.
  nlohmann::json usage_chunk() const;

  // Non-streaming: accumulate every output, then build the response.
  void add(size_t c, const engine::RequestOutput& out);
  void add(const engine::RequestOutput& out) { add(0, out); }
  nlohmann::json response() const;

  int64_t prompt_tokens() const;
  int64_t completion_tokens() const;

 private:
  struct Choice;
  nlohmann::json usage() const;
  nlohmann::json choice_usage(const Choice& ch) const;
  // `echo` (completions echo with logprobs): the choice whose prompt tokens come first.
  nlohmann::json logprobs_json(const std::vector<engine::TokenLogprob>& lps, size_t text_offset,
                               const Choice* echo = nullptr) const;
  nlohmann::json prompt_logprobs_json(const Choice& ch) const;
  // The choices the response returns: all, or with best_of > n each prompt's best n (highest first).
  std::vector<const Choice*> returned() const;
  std::string token_text(int32_t id) const;
  nlohmann::json chunk_base() const;
  const ApiRequest::Prompt& prompt_of(const Choice& ch) const;
  // Chat: this output's text as reasoning / content / tool-call deltas (`last`: the final one).
  ChatDelta chat_delta(Choice& ch, const std::string& text, bool last) const;
  std::vector<nlohmann::json> chat_stream_deltas(const ChatDelta& d, bool last) const;
  nlohmann::json chat_message(const Choice& ch, std::string& finish_reason) const;
  std::string chat_finish_reason(const Choice& ch, const std::string& engine_reason) const;
  std::vector<ToolCallDelta> required_calls(const std::string& text) const;
  bool parses_output() const;
  std::unique_ptr<ChatOutputParser> make_parser() const;

  const ApiRequest& req_;
  const ServingModel& m_;
  std::string id_;
  int64_t created_;
  std::vector<std::unique_ptr<Choice>> choices_;
};

}  // namespace fp4lm::server
