#pragma once
// Beam search as vLLM runs it (LLM.beam_search and the OpenAI server's beam_search): a client of
// the batching engine. Each step submits every live beam (prompt + its tokens) as a one-token
// request asking for the top 2 * width logprobs, extends each beam by each of them, keeps the
// `width` candidates of the highest score (a beam that ends in EOS leaves the search, completed),
// and after max_tokens steps (or when no beam is left) returns the `width` best of the completed
// and live beams. Score = cumulative logprob / length^length_penalty, length counting the prompt
// and not a final EOS (vLLM's get_beam_search_score). The steps' requests are greedy, so the
// candidates are exactly the top 2 * width (vLLM samples one more with its temperature); the
// engine computes each row's logits independently of the batch, so the result does not depend on
// what else runs.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/request.h"

namespace fp4lm::engine {

class RequestHandle;

struct BeamSearchParams {
  int64_t beam_width = 1;   // 1 .. kMaxLogprobs / 2
  int64_t max_tokens = 16;
  double length_penalty = 1.0;
  // true: stop once `beam_width` beams have completed (Hugging Face's early_stopping=True);
  // false: run max_tokens steps or until no beam is left (vLLM's beam search).
  bool early_stopping = false;
  bool ignore_eos = false;  // EOS is then an ordinary token
};

struct BeamSequence {
  std::vector<int32_t> tokens;         // generated (the EOS that ended it included)
  std::vector<TokenLogprob> logprobs;  // per token: its logprob and the step's top 2 * width
  double cumulative_logprob = 0;
  double score = 0;
  bool eos = false;  // ended by EOS ("stop"); otherwise "length"
};

// RequestError naming the parameter for an impossible width / length.
void validate_beam_search(const BeamSearchParams& p, const RequestLimits& limits, size_t prompt_len);

// Submits one request and returns its handle (Engine::submit, or a test's).
using SubmitFn = std::function<std::shared_ptr<RequestHandle>(RequestParams)>;

// The best `beam_width` beams of `prompt`, best first. `eos`: the ids that end a beam. Error when
// a step's request fails or is aborted (`cancelled` returning true aborts the search).
std::vector<BeamSequence> beam_search(const SubmitFn& submit, const std::vector<int32_t>& prompt,
                                      const BeamSearchParams& p, const std::vector<int64_t>& eos,
                                      const std::function<bool()>& cancelled = nullptr);

// vLLM's get_beam_search_score.
double beam_score(size_t prompt_len, const BeamSequence& b, double length_penalty);

}  // namespace fp4lm::engine
