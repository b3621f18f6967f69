#pragma once
// What the API layer knows about the model it serves: its names, tokenizer and chat template
// (either may be absent), limits, and the sampling defaults of its generation_config.json.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/media_url.h"
#include "engine/request.h"
#include "engine/sampling_defaults.h"
#include "engine/structured/spec.h"
#include "server/chat_output_parser.h"
#include "server/tool_call_parser.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::engine {
class ImageInput;  // engine/image_input.h
}

namespace fp4lm::server {

using engine::SamplingDefaults;  // generation_config.json's request defaults (engine/sampling_defaults.h)

struct ServingModel {
  std::string name;  // --served-model-name (default: --model as given)
  std::string path;  // the checkpoint directory
  const tokenizer::Tokenizer* tok = nullptr;
  const tokenizer::ChatTemplate* chat = nullptr;
  int64_t max_model_len = 0, vocab_size = 0;
  std::vector<int64_t> eos_ids;  // what ends a beam (use_beam_search)
  SamplingDefaults defaults;
  // --enable-auto-tool-choice --tool-call-parser NAME: tool_choice "auto" parses calls with it.
  const ToolCallParser* tool_parser = nullptr;
  ReasoningKind reasoning = ReasoningKind::none;  // --reasoning-parser
  bool vision = false;  // takes image parts (/props "modalities"; the chat page's attach button)
  // The vision tower's front (null: image parts are a 400 naming the model), where image URLs
  // may point (--allowed-local-media-path) and how many images a prompt may hold
  // (--limit-mm-per-prompt's "image"; vLLM's default 999).
  const engine::ImageInput* images = nullptr;
  engine::MediaUrlOptions media;
  int64_t image_limit = 999;
  // --structured-outputs-config.disable_any_whitespace, --structured-outputs-max-whitespace
  engine::structured::JsonWhitespace json_whitespace;
  // --enable-prompt-tokens-details: usage.prompt_tokens_details.cached_tokens (0 too); without it
  // null (absent from stream chunks), as vLLM.
  bool prompt_tokens_details = false;
  // --enable-force-include-usage: every stream carries usage, in each chunk and a last chunk (vLLM).
  bool force_include_usage = false;
  // --return-tokens-as-token-ids: the default of the request field of that name (vLLM).
  bool return_tokens_as_token_ids = false;
  // --max-logprobs: the most logprobs / top_logprobs / prompt_logprobs a request may ask for; -1
  // no cap (a request's -1, the whole vocabulary, then passes), as vLLM.
  int64_t max_logprobs = engine::kMaxLogprobs;
  // A DiffusionGemma's canvas_length (0: a token-by-token model): it generates whole canvases, so a
  // default max_tokens is what whole canvases fit; beam search and best_of > n are refused.
  int64_t canvas_length = 0;
};

}  // namespace fp4lm::server
