#pragma once
// Next-token sampling from a logits row. temperature 0 = greedy (argmax, lowest id on ties).
// Otherwise, in this order: logits / temperature -> softmax -> keep the top_k most probable
// (0 = all) -> keep the smallest set whose probability reaches top_p (1 = all) -> drop tokens
// below min_p × the most probable one (0 = none) -> draw from the renormalized rest with a
// seeded generator (same seed, same logits -> same token sequence, on every platform: the
// random stream is our own splitmix64, not an implementation-defined std distribution).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp4lm::engine {

struct SamplingParams {
  double temperature = 0.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  double min_p = 0.0;
  uint64_t seed = 0;
};

// RequestError (a UsageError) naming the parameter when a value is out of range (temperature
// < 0 or not finite, top_k < 0, top_p outside (0, 1], min_p outside [0, 1]).
void validate(const SamplingParams& p);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  int32_t sample(const float* logits, int64_t vocab);
  // Speculative decoding (engine/speculative.h): the token to emit where `draft` was proposed.
  // Greedy: the argmax (== draft when they agree). Otherwise, with p the distribution sample()
  // draws from: the draft with probability p(draft), else a draw from p without the draft,
  // renormalized — so the result is distributed as sample()'s.
  int32_t verify(const float* logits, int64_t vocab, int32_t draft);
  // A uniform double in [0, 1) from the seeded stream.
  double uniform();

 private:
  // The candidates sample() draws from, most probable first, in cand_[0, n), their
  // unnormalized probabilities in prob_; returns n (0: no candidate).
  size_t candidates(const float* logits, int64_t vocab);

  SamplingParams p_;
  uint64_t state_;
  std::vector<std::pair<float, int32_t>> cand_;
  std::vector<double> prob_;
};

// Greedy choice: the first index of the maximum (NaN logits never win).
int32_t argmax(const float* logits, int64_t vocab);

}  // namespace fp4lm::engine
