#pragma once
// OpenAI/vLLM request bodies -> engine requests. Every field is type- and range-checked here,
// before anything is queued or streamed: a bad value is an ApiError 400 naming the field, an
// unknown model a 404. Unknown fields are ignored, as in vLLM.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/beam_search.h"
#include "engine/request.h"
#include "server/api_error.h"
#include "server/chat_schema.h"
#include "server/serving_model.h"

namespace fp4lm::server {

enum class Endpoint { completions, chat };

struct ApiRequest {
  Endpoint endpoint = Endpoint::completions;
  engine::RequestParams params;  // the first prompt's; the others differ in prompt and max_tokens
  // One per prompt: /v1/completions takes a list; chat has one. Each is sampled `n` times.
  struct Prompt {
    std::vector<int32_t> ids;
    std::string text;  // completions: the prompt as text (echo); chat with echo: the echoed message
    int64_t max_tokens = 0;
  };
  std::vector<Prompt> prompts;
  int64_t n = 1;
  // best_of >= n samples per prompt run; the n with the highest cumulative logprob come back.
  int64_t best_of = 1;
  int64_t samples() const { return best_of > n ? best_of : n; }  // engine requests per prompt
  // vLLM's prompt_logprobs: -1 none; k: per prompt token its logprob and the top k. (Completions
  // echo with logprobs asks the engine for prompt logprobs too, without this field.)
  int64_t prompt_logprobs = -1;
  bool stream = false, include_usage = false;
  bool continuous_usage = false;  // stream_options.continuous_usage_stats: usage in every chunk
  bool echo = false;          // the prompt (chat: the final assistant message) comes first in the output
  std::string prompt_text;    // the first prompt's text
  bool logprobs = false;      // chat: logprobs; completions: logprobs given
  int64_t top_logprobs = 0;
  bool return_token_ids = false;  // vLLM extension: the ids in each choice, and the prompt's
  // chat: how tool calls come back. auto: the server's --tool-call-parser finds them in the text;
  // required / named: the output is constrained (tool_choice_spec) and is the calls' JSON.
  enum class ToolChoice { none, auto_calls, required, named };
  ToolChoice tool_choice = ToolChoice::none;
  std::string named_tool;          // ToolChoice::named: the function
  nlohmann::json tools = nullptr;  // the request's tools (parsers type arguments by them)
  bool parallel_tool_calls = true; // false: only the first call is returned
  bool include_reasoning = true;   // false: the reasoning parser's reasoning is dropped
  bool return_tokens_as_token_ids = false;  // logprob tokens as "token_id:N"
  std::optional<std::string> prompt_text_out;  // chat return_prompt_text: the rendered prompt
  // use_beam_search: each prompt's n best beams (width: best_of when given, else n, as vLLM maps
  // them) instead of samples; best_of is then n (the beams come ranked).
  bool beam = false;
  engine::BeamSearchParams beam_params;
  // chat: the messages' image parts, in prompt order. While not empty, prompts[0].ids hold one
  // placeholder per image: attach_chat_images loads, encodes and attaches them.
  std::vector<ImagePart> images;
};

// The engine request of candidate `c` (prompt c / best_of, sample c % best_of: a seed is offset
// by the sample's index, as vLLM seeds parallel samples). Candidates are the choices unless
// best_of > n.
engine::RequestParams choice_params(const ApiRequest& r, size_t c);

// `random_seed` is used when the request has no seed. ApiError on any invalid field.
ApiRequest parse_completion_request(const nlohmann::json& body, const ServingModel& m, uint64_t random_seed);
// `ordered`: the same body parsed keeping key order (the template then sees messages and tools in
// the request's order, as under Hugging Face); null: sorted keys.
ApiRequest parse_chat_request(const nlohmann::json& body, const ServingModel& m, uint64_t random_seed,
                              const nlohmann::ordered_json* ordered = nullptr);

// A chat request with images (ApiRequest::images): each loaded from its URL, decoded, checked to
// fit the context and encoded by the model's vision tower (server/chat_images.h), the prompt's
// placeholders expanded and the images attached (engine::ImageInput::attach), then max_tokens
// and the engine's validator as for any prompt. The slow part of a vision request: the server
// runs it on its image thread. ApiError 400 naming the image ("image 2: ...") and its field.
// Nothing to do without images.
void attach_chat_images(ApiRequest& r, const nlohmann::json& body, const ServingModel& m);

// The prompt string of a chat request (template applied): /tokenize with messages uses it too.
// add_generation_prompt / continue_final_message as vLLM applies them. The image parts go to
// `images` (null: an image part is a 400).
std::string render_chat_prompt(const nlohmann::json& body, const ServingModel& m,
                               const nlohmann::ordered_json* ordered = nullptr,
                               std::vector<ImagePart>* images = nullptr);
// 404 when `model` names another model; 400 when it is not a string.
void check_model_field(const nlohmann::json& body, const ServingModel& m);
// /tokenize: a prompt string (add_special_tokens) or chat messages (rendered as for chat).
struct TokenizeRequest {
  std::vector<int32_t> ids;
  bool return_token_strs = false;
};
TokenizeRequest parse_tokenize_request(const nlohmann::json& body, const ServingModel& m,
                                       const nlohmann::ordered_json* ordered = nullptr);
// /detokenize: the ids of 'tokens', each checked against the tokenizer's vocabulary.
std::vector<int32_t> parse_detokenize_request(const nlohmann::json& body, const ServingModel& m);

// Parses a request body: 400 on bad JSON or a non-object.
nlohmann::json parse_body(const std::string& body);

}  // namespace fp4lm::server
