#pragma once
// What happens to a logits row between the model and the sampler, per request, with vLLM's
// semantics: the logprobs a client asked for come from the raw logits (log-softmax before any
// penalty or temperature); then EOS/stop ids are masked while fewer than min_tokens were
// generated; then the repetition penalty (prompt and output tokens: positive logits divided by
// it, negative ones multiplied), then frequency (× count in the output) and presence (once per
// token seen in the output) penalties are subtracted, then logit_bias is added.
#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/request.h"

namespace fp4lm::engine {

struct PenaltyState {
  std::unordered_set<int32_t> prompt;         // filled only when repetition_penalty != 1
  std::unordered_map<int32_t, int64_t> output_counts;
};

bool has_penalties(const RequestParams& p);
void apply_penalties(float* logits, int64_t vocab, const RequestParams& p, const PenaltyState& s);
// logits[id] += bias for each (id, bias) (ids validated against the vocabulary beforehand).
void apply_logit_bias(float* logits, int64_t vocab, const std::vector<std::pair<int32_t, float>>& bias);
// Sets the listed ids (those inside [0, vocab)) to -inf.
void mask_ids(float* logits, int64_t vocab, const std::vector<int64_t>& ids);
// allowed_token_ids: every id outside `allowed` (ids inside [0, vocab)) becomes -inf.
void allow_only(float* logits, int64_t vocab, const std::vector<int32_t>& allowed);
// log-softmax of the raw row: the chosen token's logprob and rank, and the k most probable (ties:
// lower id).
TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t chosen, int64_t k);
// The same with `top` holding the listed ids' logprobs in their order (logprob_token_ids).
TokenLogprob token_logprob_of(const float* logits, int64_t vocab, int32_t chosen, const std::vector<int32_t>& ids);

}  // namespace fp4lm::engine
