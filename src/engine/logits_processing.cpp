#include "engine/logits_processing.h"

#include <algorithm>
#include <cmath>

namespace fp4lm::engine {

bool has_penalties(const RequestParams& p) {
  return p.presence_penalty != 0 || p.frequency_penalty != 0 || p.repetition_penalty != 1;
}

void apply_penalties(float* logits, int64_t vocab, const RequestParams& p, const PenaltyState& s) {
  if (p.repetition_penalty != 1) {
    const float r = static_cast<float>(p.repetition_penalty);
    auto penalize = [&](int32_t t) {
      if (t < 0 || t >= vocab) return;
      logits[t] = logits[t] > 0 ? logits[t] / r : logits[t] * r;
    };
    // Each token once, whether it appears in the prompt, the output or both.
    for (int32_t t : s.prompt) penalize(t);
    for (const auto& [t, n] : s.output_counts)
      if (!s.prompt.count(t)) penalize(t);
  }
  for (const auto& [t, n] : s.output_counts) {
    if (t < 0 || t >= vocab) continue;
    logits[t] -= static_cast<float>(p.frequency_penalty * static_cast<double>(n) + p.presence_penalty);
  }
}

void mask_ids(float* logits, int64_t vocab, const std::vector<int64_t>& ids) {
  for (int64_t t : ids)
    if (t >= 0 && t < vocab) logits[t] = -INFINITY;
}

void allow_only(float* logits, int64_t vocab, const std::vector<int32_t>& allowed) {
  std::vector<std::pair<int32_t, float>> kept;
  kept.reserve(allowed.size());
  for (int32_t t : allowed)
    if (t >= 0 && t < vocab) kept.emplace_back(t, logits[t]);
  std::fill(logits, logits + vocab, -INFINITY);
  for (const auto& [t, v] : kept) logits[t] = v;
}

namespace {

// The log-sum-exp of a row (NaN entries left out).
double log_sum_exp(const float* logits, int64_t vocab) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i])) mx = std::max(mx, static_cast<double>(logits[i]));
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i])) sum += std::exp(static_cast<double>(logits[i]) - mx);
  return mx + std::log(sum);
}

}  // namespace

TokenLogprob token_logprob(const float* logits, int64_t vocab, int32_t chosen, int64_t k) {
  const double lse = log_sum_exp(logits, vocab);
  auto lp = [&](int64_t i) {
    return std::isnan(logits[i]) ? -INFINITY : static_cast<float>(static_cast<double>(logits[i]) - lse);
  };
  TokenLogprob out;
  out.id = chosen;
  out.logprob = lp(chosen);
  // vLLM's rank: how many tokens are at least as probable as the chosen one (itself included).
  for (int64_t i = 0; i < vocab; ++i) out.rank += lp(i) >= out.logprob;
  k = std::min<int64_t>(k, vocab);
  if (k > 0) {
    std::vector<int32_t> idx(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) idx[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    auto better = [&](int32_t a, int32_t b) {
      float la = lp(a), lb = lp(b);
      return la != lb ? la > lb : a < b;
    };
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
    for (int64_t i = 0; i < k; ++i) out.top.emplace_back(idx[static_cast<size_t>(i)], lp(idx[static_cast<size_t>(i)]));
  }
  return out;
}

TokenLogprob token_logprob_of(const float* logits, int64_t vocab, int32_t chosen, const std::vector<int32_t>& ids) {
  TokenLogprob out = token_logprob(logits, vocab, chosen, 0);
  const double lse = log_sum_exp(logits, vocab);
  for (int32_t t : ids) {
    if (t < 0 || t >= vocab) continue;
    const bool listed = std::any_of(out.top.begin(), out.top.end(), [&](const auto& e) { return e.first == t; });
    if (listed) continue;  // a repeated id once, as vLLM's per-token dict holds it
    out.top.emplace_back(t, std::isnan(logits[t]) ? -INFINITY : static_cast<float>(static_cast<double>(logits[t]) - lse));
  }
  return out;
}

void apply_logit_bias(float* logits, int64_t vocab, const std::vector<std::pair<int32_t, float>>& bias) {
  for (const auto& [id, b] : bias)
    if (id >= 0 && id < vocab) logits[id] += b;
}

}  // namespace fp4lm::engine
