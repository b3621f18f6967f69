#include "engine/beam_search.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include <fmt/format.h>

#include "engine/engine.h"

namespace fp4lm::engine {

void validate_beam_search(const BeamSearchParams& p, const RequestLimits& limits, size_t prompt_len) {
  // Each step asks for the top 2 * width logprobs, at most kMaxLogprobs (vLLM's max_logprobs).
  if (p.beam_width < 1 || p.beam_width > kMaxLogprobs / 2)
    throw RequestError(fmt::format("beam search width (n) must be in [1, {}], got {}", kMaxLogprobs / 2, p.beam_width),
                       "n");
  if (p.max_tokens < 1) throw RequestError(fmt::format("max_tokens must be at least 1, got {}", p.max_tokens), "max_tokens");
  if (!std::isfinite(p.length_penalty))
    throw RequestError(fmt::format("length_penalty must be finite, got {}", p.length_penalty), "length_penalty");
  if (static_cast<int64_t>(prompt_len) >= limits.max_model_len ||
      p.max_tokens > limits.max_model_len - static_cast<int64_t>(prompt_len))
    throw RequestError(fmt::format("This model's maximum context length is {} tokens. However, you requested {} "
                                   "tokens ({} in the prompt, {} for the completion).",
                                   limits.max_model_len, static_cast<int64_t>(prompt_len) + p.max_tokens, prompt_len,
                                   p.max_tokens),
                       "max_tokens");
}

double beam_score(size_t prompt_len, const BeamSequence& b, double length_penalty) {
  double len = static_cast<double>(prompt_len + b.tokens.size());
  if (b.eos) len -= 1;
  return b.cumulative_logprob / std::pow(len, length_penalty);
}

namespace {

// The request's one output: waits until it has finished.
RequestOutput one_token(RequestHandle& h, const std::function<bool()>& cancelled) {
  RequestOutput last;
  std::vector<TokenLogprob> lps;
  while (!last.finished) {
    for (RequestOutput& o : h.wait(std::chrono::milliseconds(50))) {
      lps.insert(lps.end(), o.logprobs.begin(), o.logprobs.end());
      last = std::move(o);
    }
    if (!last.finished && cancelled && cancelled()) h.cancel();
  }
  if (last.finish_reason == "error") fail("beam search step failed: {}", last.error);
  if (last.finish_reason == "abort") fail("beam search aborted");
  if (lps.empty()) fail("beam search step returned no logprobs");
  last.logprobs = std::move(lps);
  return last;
}

}  // namespace

std::vector<BeamSequence> beam_search(const SubmitFn& submit, const std::vector<int32_t>& prompt,
                                      const BeamSearchParams& p, const std::vector<int64_t>& eos,
                                      const std::function<bool()>& cancelled) {
  const size_t width = static_cast<size_t>(p.beam_width);
  auto is_eos = [&](int32_t t) { return !p.ignore_eos && std::find(eos.begin(), eos.end(), t) != eos.end(); };
  std::vector<BeamSequence> live(1), completed;
  for (int64_t step = 0; step < p.max_tokens && !live.empty(); ++step) {
    if (p.early_stopping && completed.size() >= width) break;
    // Every live beam one token further, all at once (the engine batches them).
    std::vector<std::shared_ptr<RequestHandle>> handles;
    try {
      for (const BeamSequence& b : live) {
        RequestParams r;
        r.prompt = prompt;
        r.prompt.insert(r.prompt.end(), b.tokens.begin(), b.tokens.end());
        r.max_tokens = 1;
        r.ignore_eos = true;
        r.sampling.temperature = 0;
        r.logprobs = 2 * p.beam_width;
        handles.push_back(submit(std::move(r)));
      }
    } catch (...) {
      for (auto& h : handles) h->cancel();
      throw;
    }
    std::vector<BeamSequence> candidates;
    for (size_t i = 0; i < live.size(); ++i) {
      const RequestOutput out = one_token(*handles[i], cancelled);
      const TokenLogprob& lp = out.logprobs.front();
      // The top 2 * width, most probable first (the greedy token is among them).
      for (const auto& [id, logprob] : lp.top) {
        BeamSequence b = live[i];
        b.tokens.push_back(id);
        b.logprobs.push_back({id, logprob, lp.top, 0});
        b.cumulative_logprob += logprob;
        b.eos = is_eos(id);
        b.score = beam_score(prompt.size(), b, p.length_penalty);
        (b.eos ? completed : candidates).push_back(std::move(b));
      }
    }
    // Highest score first; ties keep the candidates' order (Python's stable sorted()).
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const BeamSequence& a, const BeamSequence& b) { return a.score > b.score; });
    if (candidates.size() > width) candidates.resize(width);
    live = std::move(candidates);
  }
  for (BeamSequence& b : live) completed.push_back(std::move(b));
  std::stable_sort(completed.begin(), completed.end(),
                   [](const BeamSequence& a, const BeamSequence& b) { return a.score > b.score; });
  if (completed.size() > width) completed.resize(width);
  return completed;
}

}  // namespace fp4lm::engine
