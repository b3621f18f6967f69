#include "engine/request.h"

#include <cmath>

#include <fmt/format.h>

namespace fp4lm::engine {

void validate(const RequestParams& p, int64_t vocab_size) {
  auto bad = [](const std::string& param, const std::string& msg) { throw RequestError(msg, param); };
  if (p.prompt.empty()) bad("prompt", "the prompt is empty");
  for (int32_t t : p.prompt)
    if (t < 0 || t >= vocab_size)
      bad("prompt", fmt::format("token id {} is outside the vocabulary [0, {})", t, vocab_size));
  if (p.max_tokens < 1) bad("max_tokens", fmt::format("max_tokens must be at least 1, got {}", p.max_tokens));
  if (p.min_tokens < 0) bad("min_tokens", fmt::format("min_tokens must be >= 0, got {}", p.min_tokens));
  if (p.min_tokens > p.max_tokens)
    bad("min_tokens", fmt::format("min_tokens ({}) must be <= max_tokens ({})", p.min_tokens, p.max_tokens));
  const SamplingParams& s = p.sampling;
  if (!std::isfinite(s.temperature) || s.temperature < 0)
    bad("temperature", fmt::format("temperature must be a finite number >= 0, got {}", s.temperature));
  if (s.top_k < 0) bad("top_k", fmt::format("top_k must be -1 (disable), 0 (disable) or at least 1, got {}", s.top_k));
  if (!(s.top_p > 0 && s.top_p <= 1)) bad("top_p", fmt::format("top_p must be in (0, 1], got {}", s.top_p));
  if (!(s.min_p >= 0 && s.min_p <= 1)) bad("min_p", fmt::format("min_p must be in [0, 1], got {}", s.min_p));
  if (!(p.presence_penalty >= -2 && p.presence_penalty <= 2))
    bad("presence_penalty", fmt::format("presence_penalty must be in [-2, 2], got {}", p.presence_penalty));
  if (!(p.frequency_penalty >= -2 && p.frequency_penalty <= 2))
    bad("frequency_penalty", fmt::format("frequency_penalty must be in [-2, 2], got {}", p.frequency_penalty));
  if (!(p.repetition_penalty > 0 && p.repetition_penalty <= 2))
    bad("repetition_penalty", fmt::format("repetition_penalty must be in (0, 2], got {}", p.repetition_penalty));
  if (p.logprobs > 20) bad("logprobs", fmt::format("logprobs must be at most 20, got {}", p.logprobs));
  for (int32_t t : p.stop_token_ids)
    if (t < 0 || t >= vocab_size)
      bad("stop_token_ids", fmt::format("stop token id {} is outside the vocabulary [0, {})", t, vocab_size));
}

}  // namespace fp4lm::engine
