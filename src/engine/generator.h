#pragma once
// The generation loop of one sequence: prefill the prompt as one batch (the model chunks it),
// then decode one token per step (M = 1) until an EOS id or max_tokens.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/causal_lm.h"

namespace fp4lm::engine {

struct GenerationParams {
  int64_t max_tokens = 256;
  SamplingParams sampling;
  bool stop_at_eos = true;       // stop after emitting one of the model's EOS ids
  std::vector<int64_t> stop_ids;  // more ids that end generation (emitted, like EOS)
};

struct GenerationResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> output_ids;  // generated tokens, including a final EOS/stop id
  std::string finish_reason;        // "stop" (EOS or stop id) or "length" (max_tokens)
  double prefill_seconds = 0;       // prompt forward, including the first sampled token
  double decode_seconds = 0;        // every later step
  int64_t decode_steps = 0;         // M=1 forwards

  double prefill_tok_s() const { return prefill_seconds > 0 ? prompt_ids.size() / prefill_seconds : 0; }
  double decode_tok_s() const { return decode_seconds > 0 ? decode_steps / decode_seconds : 0; }
};

// Called with each generated token as soon as it is chosen.
using TokenCallback = std::function<void(int32_t)>;

// Error when the prompt is empty or prompt + max_tokens exceeds the model's max_model_len.
GenerationResult generate(const model::CausalLM& lm, const std::vector<int32_t>& prompt,
                          const GenerationParams& params, const TokenCallback& on_token = {});

}  // namespace fp4lm::engine
