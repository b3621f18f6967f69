#pragma once
// n / best_of sampling, the rules every front end shares (the server's choices, fp4lm.LLM's
// outputs): how the samples of one prompt are seeded and which of them are returned.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp4lm::engine {

// The seed of a request's index-th sample (vLLM: seed + index, wrapping at 2^64).
inline uint64_t sample_seed(uint64_t seed, uint64_t index) { return seed + index; }

// vLLM v0's best_of > n: the indices of the n samples with the highest cumulative logprob of their
// sampled tokens, highest first; ties keep the earlier sample first. Fewer samples than n: all.
std::vector<size_t> best_of_order(const std::vector<double>& cumulative_logprobs, size_t n);

}  // namespace fp4lm::engine
