#pragma once
// One request run to the end on the calling thread: the engine's own scheduler with a single
// sequence, so `fp4lm generate` has exactly the server's and the Python LLM's semantics (the
// same validation and errors, sampling, penalties, stop strings and ids, min_tokens, logprobs).
// The prompt is prefilled in one step (the model chunks it), then one token per step.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "engine/speculative.h"
#include "engine/step_model.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::engine {

struct GenerationResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;  // generated tokens, including a final EOS/stop id
  std::string text;                 // "" without a tokenizer; stop strings are not part of it
  std::vector<TokenLogprob> logprobs;  // one per token when logprobs >= 0
  std::string finish_reason;        // "stop" (EOS, stop id or stop string) or "length"
  std::optional<std::string> stop_reason;  // the stop string that ended it
  std::optional<int32_t> stop_token;       // the stop_token_ids entry that ended it
  double prefill_seconds = 0;       // the prompt's step, including the first sampled token
  double decode_seconds = 0;        // every later step
  int64_t decode_steps = 0;         // steps after the first (one token each, more with speculation)
  int64_t decode_tokens = 0;        // tokens those steps produced
  int64_t draft_tokens = 0, accepted_tokens = 0;  // speculative decoding

  double prefill_tok_s() const { return prefill_seconds > 0 ? prompt_ids.size() / prefill_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? decode_tokens / decode_seconds : 0; }
};

// Called with each step's output as soon as it is made (new tokens and their text).
using OutputCallback = std::function<void(const RequestOutput&)>;

// RequestError (a UsageError) for bad parameters, as the server's 400s; Error with the model's
// message when a step fails (a non-finite value, ...). `tok` may be null (no text).
// `spec`: speculative decoding (engine/speculative.h; default off).
GenerationResult generate(StepModel& model, const tokenizer::Tokenizer* tok, RequestParams params,
                          const OutputCallback& on_output = {}, const SpeculativeConfig& spec = {});
GenerationResult generate(const model::CausalLM& lm, const tokenizer::Tokenizer* tok, RequestParams params,
                          const OutputCallback& on_output = {}, const SpeculativeConfig& spec = {});

}  // namespace fp4lm::engine
