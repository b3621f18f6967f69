#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "engine/request_error.h"

namespace fp4lm::engine {

void validate(const SamplingParams& p) {
  auto bad = [](const char* param, const std::string& msg) { throw RequestError(msg, param); };
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature))
    bad("temperature", fmt::format("temperature must be a finite number >= 0, got {}", p.temperature));
  if (p.top_k < 0) bad("top_k", fmt::format("top_k must be -1 (disable), 0 (disable) or at least 1, got {}", p.top_k));
  if (!(p.top_p > 0 && p.top_p <= 1)) bad("top_p", fmt::format("top_p must be in (0, 1], got {}", p.top_p));
  if (!(p.min_p >= 0 && p.min_p <= 1)) bad("min_p", fmt::format("min_p must be in [0, 1], got {}", p.min_p));
}

int32_t argmax(const float* logits, int64_t vocab) {
  int32_t best = 0;
  float bv = -INFINITY;
  bool found = false;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) continue;
    if (!found || logits[i] > bv) {
      bv = logits[i];
      best = static_cast<int32_t>(i);
      found = true;
    }
  }
  return best;
}

Sampler::Sampler(const SamplingParams& p) : p_(p), state_(p.seed) { validate(p); }

double Sampler::uniform() {
  // splitmix64: a fixed, portable stream.
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

size_t Sampler::candidates(const float* logits, int64_t vocab) {
  cand_.clear();
  for (int64_t i = 0; i < vocab; ++i)
    if (!std::isnan(logits[i])) cand_.emplace_back(logits[i], static_cast<int32_t>(i));
  if (cand_.empty()) return 0;
  // Descending logit, ascending id on ties: a deterministic order.
  auto by_prob = [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; };
  size_t keep = cand_.size();
  if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < keep) {
    keep = static_cast<size_t>(p_.top_k);
    std::partial_sort(cand_.begin(), cand_.begin() + keep, cand_.end(), by_prob);
    cand_.resize(keep);
  } else {
    std::sort(cand_.begin(), cand_.end(), by_prob);
  }
  // Softmax of logits / T in double, over the kept candidates.
  std::vector<double>& prob = prob_;
  prob.assign(keep, 0.0);
  const double mx = cand_[0].first;
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp((cand_[i].first - mx) / p_.temperature);
  for (double& q : prob) q /= sum;
  if (p_.top_p < 1) {
    double acc = 0;
    size_t n = 0;
    while (n < keep) {
      acc += prob[n++];
      if (acc >= p_.top_p) break;
    }
    keep = n;
  }
  if (p_.min_p > 0) {
    const double floor = p_.min_p * prob[0];
    size_t n = 1;
    while (n < keep && prob[n] >= floor) ++n;
    keep = n;
  }
  return keep;
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
  if (p_.temperature == 0) return argmax(logits, vocab);
  const size_t keep = candidates(logits, vocab);
  if (keep == 0) return 0;
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += prob_[i];
  double r = uniform() * total;
  for (size_t i = 0; i < keep; ++i) {
    r -= prob_[i];
    if (r < 0) return cand_[i].second;
  }
  return cand_[keep - 1].second;
}

int32_t Sampler::verify(const float* logits, int64_t vocab, int32_t draft) {
  if (p_.temperature == 0) return argmax(logits, vocab);
  const size_t keep = candidates(logits, vocab);
  if (keep == 0) return 0;
  double total = 0, p_draft = 0;
  size_t last_other = keep;  // the last candidate that is not the draft
  for (size_t i = 0; i < keep; ++i) {
    total += prob_[i];
    if (cand_[i].second == draft) p_draft = prob_[i];
    else last_other = i;
  }
  if (uniform() * total < p_draft) return draft;  // accepted with probability p(draft)
  if (last_other == keep) return draft;           // (p(draft) = 1 accepts above; rounding only)
  double r = uniform() * (total - p_draft);
  for (size_t i = 0; i < keep; ++i) {
    if (cand_[i].second == draft) continue;
    r -= prob_[i];
    if (r < 0) return cand_[i].second;
  }
  return cand_[last_other].second;
}

}  // namespace fp4lm::engine
