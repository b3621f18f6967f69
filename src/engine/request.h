#pragma once
// One generation request as the engine sees it (after the API layer has tokenized and validated
// it), and the incremental output it streams back. No HTTP here: the server and the Python API
// both build these.
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request_error.h"
#include "engine/sampler.h"
#include "engine/structured/spec.h"

namespace fp4lm::engine {

constexpr int64_t kMaxLogprobs = 20;  // vLLM's default max_logprobs
constexpr int64_t kMaxLogprobTokenIds = 128;  // vLLM's MAX_LOGPROB_TOKEN_IDS

struct PromptImages;  // engine/prompt_images.h

struct RequestParams {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;               // EOS and stop_token_ids are masked before this many
  SamplingParams sampling;              // temperature 0 = greedy; seed is per request
  std::vector<std::string> stop;        // stop strings: not part of the output text
  std::vector<int32_t> stop_token_ids;  // end generation like EOS (token counted, not in the text)
  bool ignore_eos = false;
  double presence_penalty = 0, frequency_penalty = 0, repetition_penalty = 1;
  int64_t logprobs = -1;                // -1: none; k >= 0: the sampled token's + top-k logprobs
  // -1: none; k >= 0: every prompt token's logprob (after the first) and the top k at its
  // position. Such a request computes its whole prompt (no prefix-cache hit, as in vLLM).
  int64_t prompt_logprobs = -1;
  bool skip_special_tokens = true;
  structured::StructuredSpec structured;  // structured outputs: a token mask at every step
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to these ids' logits before sampling
  // vLLM's allowed_token_ids: every other id is masked (-inf) before penalties and sampling.
  std::vector<int32_t> allowed_token_ids;
  // vLLM's logprob_token_ids: with logprobs >= 0, each token's `top` is these ids' logprobs (in
  // this order) instead of the most probable k.
  std::vector<int32_t> logprob_token_ids;
  // The prompt's images (engine/prompt_images.h): their rows replace the placeholder tokens'
  // embeddings, their tokens take 3-D positions, the prefix cache keys them by content.
  std::shared_ptr<const PromptImages> images;
};

// What a request is checked against: the model's vocabulary and context length.
struct RequestLimits {
  int64_t vocab_size = 0;
  int64_t max_model_len = 0;
  int64_t max_logprobs = kMaxLogprobs;  // vLLM's --max-logprobs: -1 is no cap (the vocabulary)
};

// The one validator of a request's values, used by the server, the Python LLM and the CLI
// (through the scheduler): RequestError naming the parameter when a value is out of range or the
// prompt plus max_tokens does not fit the context (compared without overflow, whatever the
// values). The API layers check JSON/Python types first.
void validate(const RequestParams& p, const RequestLimits& limits);

struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most probable first
  int64_t rank = 0;  // 1 + the number of other tokens at least as probable (vLLM's rank)
};

// What one engine step produced for a request. Text is only ever whole UTF-8 characters and
// never contains a (possible start of a) stop string.
struct RequestOutput {
  std::vector<int32_t> token_ids;  // tokens generated this step
  std::string text;                // new text
  std::vector<TokenLogprob> logprobs;  // one per token when logprobs were asked for
  // prompt_logprobs: in the request's first output, one per prompt token after the first.
  std::vector<TokenLogprob> prompt_logprobs;
  bool finished = false;
  std::string finish_reason;       // "stop", "length", "abort" or "error" (when finished)
  std::optional<std::string> stop_reason;  // the stop string that ended it
  std::optional<int32_t> stop_token;       // the stop_token_ids entry that ended it (not set for EOS)
  int64_t prompt_tokens = 0, completion_tokens = 0;  // totals so far
  int64_t cached_tokens = 0;       // prompt tokens the prefix cache supplied
  std::string error;               // finish_reason "error": what went wrong
  std::exception_ptr cause;        // finish_reason "error": the exception, when there was one
};

}  // namespace fp4lm::engine
