#pragma once
// Engine outputs -> OpenAI/vLLM response objects: whole responses (text_completion,
// chat.completion) and stream chunks (text_completion, chat.completion.chunk), with exact usage
// and logprobs in each endpoint's format.
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

  // Streaming: the chunks one engine output becomes (none when it carries nothing to show).
  // The first call also yields the chat role chunk / the completions echo.
  std::vector<nlohmann::json> stream_chunks(const engine::RequestOutput& out);
  // The usage-only chunk sent last when stream_options.include_usage is set.
  nlohmann::json usage_chunk() const;

  // Non-streaming: accumulate every output, then build the response.
  void add(const engine::RequestOutput& out);
  nlohmann::json response() const;

  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const { return completion_tokens_; }

 private:
  nlohmann::json usage() const;
  nlohmann::json logprobs_json(const std::vector<engine::TokenLogprob>& lps, size_t text_offset) const;
  std::string token_text(int32_t id) const;
  nlohmann::json chunk_base() const;
  // Chat: this output's text as reasoning / content / tool-call deltas (`last`: the final one).
  ChatDelta chat_delta(const std::string& text, bool last);
  std::vector<nlohmann::json> chat_stream_deltas(const ChatDelta& d, bool last);
  nlohmann::json chat_message(std::string& finish_reason) const;
  std::string chat_finish_reason(const std::string& engine_reason) const;
  std::vector<ToolCallDelta> required_calls(const std::string& text) const;
  bool parses_output() const;


  const ApiRequest& req_;
  const ServingModel& m_;
  std::string id_;
  int64_t created_;
  bool started_ = false;
  std::string text_;
  std::vector<int32_t> ids_;
  std::vector<engine::TokenLogprob> logprobs_;
  std::string finish_reason_;
  nlohmann::json stop_reason_ = nullptr;
  int64_t prompt_tokens_ = 0, completion_tokens_ = 0;
  std::unique_ptr<ChatOutputParser> parser_;  // streaming chat with a reasoning / tool parser
  std::string tool_text_;                      // tool_choice "required": the output so far
  std::string named_id_;                       // tool_choice named: the call's id once started
  size_t tool_calls_ = 0;                      // calls streamed so far
};

}  // namespace fp4lm::server
