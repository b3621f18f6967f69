#include "engine/request.h"

#include <fmt/format.h>

#include "engine/prompt_images.h"

namespace fp4lm::engine {

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& msg) { throw RequestError(msg, param); }

void check_ids(const std::vector<int32_t>& ids, const char* param, const char* what, int64_t vocab) {
  for (int32_t t : ids)
    if (t < 0 || t >= vocab) bad(param, fmt::format("{} id {} is outside the vocabulary [0, {})", what, t, vocab));
}

void check_range(const char* param, double v, double lo, double hi, bool lo_open) {
  if (lo_open ? v > lo && v <= hi : v >= lo && v <= hi) return;  // NaN fails both
  bad(param, fmt::format("{} must be in {}{}, {}], got {}", param, lo_open ? "(" : "[", lo, hi, v));
}

// The context check: prompt + max_tokens <= max_model_len, written so that no value overflows.
void check_context(const RequestParams& p, int64_t len) {
  const int64_t prompt = static_cast<int64_t>(p.prompt.size());
  if (prompt >= len)
    bad("prompt", fmt::format("This model's maximum context length is {} tokens. However, your prompt has {} "
                              "tokens, which leaves no room for generated tokens.",
                              len, prompt));
  if (p.max_tokens > len - prompt) {
    // Both are in [0, 2^63): their sum fits an unsigned 64-bit integer.
    const uint64_t requested = static_cast<uint64_t>(prompt) + static_cast<uint64_t>(p.max_tokens);
    bad("max_tokens", fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                  "tokens ({} in the prompt, {} for the completion). Please reduce the length of "
                                  "the prompt or the completion.",
                                  len, requested, prompt, p.max_tokens));
  }
}

}  // namespace

void validate(const RequestParams& p, const RequestLimits& lim) {
  if (p.prompt.empty()) bad("prompt", "the prompt is empty");
  check_ids(p.prompt, "prompt", "token", lim.vocab_size);
  if (p.max_tokens < 1) bad("max_tokens", fmt::format("max_tokens must be at least 1, got {}", p.max_tokens));
  check_context(p, lim.max_model_len);
  if (p.images && (p.images->embeds.size() != p.prompt.size() ||
                   (!p.images->positions.empty() && p.images->positions.size() != 3 * p.prompt.size()) ||
                   (!p.images->bidir_end.empty() && p.images->bidir_end.size() != p.prompt.size())))
    bad("images", fmt::format("the prompt's images cover {} tokens but the prompt has {}", p.images->embeds.size(),
                              p.prompt.size()));
  if (p.min_tokens < 0) bad("min_tokens", fmt::format("min_tokens must be >= 0, got {}", p.min_tokens));
  if (p.min_tokens > p.max_tokens)
    bad("min_tokens", fmt::format("min_tokens ({}) must be <= max_tokens ({})", p.min_tokens, p.max_tokens));
  validate(p.sampling);
  check_range("presence_penalty", p.presence_penalty, -2, 2, false);
  check_range("frequency_penalty", p.frequency_penalty, -2, 2, false);
  check_range("repetition_penalty", p.repetition_penalty, 0, 2, true);
  const int64_t max_lp = lim.max_logprobs < 0 ? lim.vocab_size : lim.max_logprobs;
  // With logprob_token_ids, logprobs is their count: capped by kMaxLogprobTokenIds instead.
  if (p.logprob_token_ids.empty() && p.logprobs > max_lp)
    bad("logprobs", fmt::format("logprobs must be at most {}, got {}", max_lp, p.logprobs));
  if (p.logprobs < -1) bad("logprobs", fmt::format("logprobs must be -1 (none) or at least 0, got {}", p.logprobs));
  if (p.prompt_logprobs > max_lp)
    bad("prompt_logprobs", fmt::format("prompt_logprobs must be at most {}, got {}", max_lp, p.prompt_logprobs));
  if (p.prompt_logprobs < -1)
    bad("prompt_logprobs", fmt::format("prompt_logprobs must be -1 (none) or at least 0, got {}", p.prompt_logprobs));
  if (static_cast<int64_t>(p.logprob_token_ids.size()) > kMaxLogprobTokenIds)
    bad("logprob_token_ids", fmt::format("Requested logprob_token_ids of length {}, which is greater than max allowed: {}",
                                         p.logprob_token_ids.size(), kMaxLogprobTokenIds));
  check_ids(p.logprob_token_ids, "logprob_token_ids", "logprob_token_ids", lim.vocab_size);
  check_ids(p.allowed_token_ids, "allowed_token_ids", "allowed token", lim.vocab_size);
  check_ids(p.stop_token_ids, "stop_token_ids", "stop token", lim.vocab_size);
  for (const auto& [id, bias] : p.logit_bias) {
    if (id < 0 || id >= lim.vocab_size)
      bad("logit_bias", fmt::format("logit_bias token id {} is outside the vocabulary [0, {})", id, lim.vocab_size));
    if (!(bias >= -100 && bias <= 100)) bad("logit_bias", fmt::format("logit_bias values must be in [-100, 100], got {}", bias));
  }
}

}  // namespace fp4lm::engine
