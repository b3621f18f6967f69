#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace fp4lm::engine {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GenerationResult generate(const model::CausalLM& lm, const std::vector<int32_t>& prompt,
                          const GenerationParams& params, const TokenCallback& on_token) {
  if (prompt.empty()) fail("generate: the prompt is empty");
  if (params.max_tokens < 0) usage_fail("--max-tokens must be >= 0 (got {})", params.max_tokens);
  const int64_t limit = lm.max_model_len();
  const int64_t p = static_cast<int64_t>(prompt.size());
  if (p + params.max_tokens > limit)
    fail("prompt ({} tokens) + --max-tokens ({}) = {} exceeds the maximum model length {} (--max-model-len)", p,
         params.max_tokens, p + params.max_tokens, limit);

  GenerationResult r;
  r.prompt_ids = prompt;
  r.finish_reason = "length";
  if (params.max_tokens == 0) return r;
  std::vector<int64_t> stops = params.stop_ids;
  if (params.stop_at_eos) stops.insert(stops.end(), lm.eos_ids().begin(), lm.eos_ids().end());
  auto is_stop = [&](int32_t t) { return std::find(stops.begin(), stops.end(), t) != stops.end(); };

  Sampler sampler(params.sampling);
  model::SequenceState cache = lm.new_sequence();
  std::vector<float> logits(static_cast<size_t>(lm.vocab_size()));
  auto t0 = std::chrono::steady_clock::now();
  lm.forward(cache, prompt.data(), p, model::LogitsMode::last, logits.data());
  int32_t tok = sampler.sample(logits.data(), lm.vocab_size());
  r.prefill_seconds = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  while (true) {
    r.output_ids.push_back(tok);
    if (on_token) on_token(tok);
    if (is_stop(tok)) {
      r.finish_reason = "stop";
      break;
    }
    if (static_cast<int64_t>(r.output_ids.size()) >= params.max_tokens) break;
    lm.forward(cache, &tok, 1, model::LogitsMode::last, logits.data());
    ++r.decode_steps;
    tok = sampler.sample(logits.data(), lm.vocab_size());
  }
  r.decode_seconds = seconds_since(t0);
  return r;
}

}  // namespace fp4lm::engine
