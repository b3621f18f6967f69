#pragma once
// The indices torch.topk(v, k) (largest, sorted) returns on the CPU, ties included: its TopKImpl
// pairs each value with its index and runs std::partial_sort (when k·64 <= n) or
// std::nth_element at k - 1 then std::sort of the first k - 1, comparing values only. Which of
// several equal values win is that algorithm's (libstdc++'s), not the lowest index; a selector
// whose scores tie often (Qwen4-Exp's QSA: relu sums of exactly 0) must break ties the same way to
// pick the same keys.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace fp4lm::model {

inline std::vector<int32_t> torch_topk_indices(const std::vector<float>& v, int64_t k) {
  using E = std::pair<float, int64_t>;
  std::vector<E> q(v.size());
  for (size_t j = 0; j < v.size(); ++j) q[j] = {v[j], static_cast<int64_t>(j)};
  const auto greater = [](const E& x, const E& y) { return x.first > y.first; };
  const int64_t n = static_cast<int64_t>(v.size());
  k = std::min(k, n);
  if (k <= 0) return {};
  if (k * 64 <= n) {
    std::partial_sort(q.begin(), q.begin() + k, q.end(), greater);
  } else {
    std::nth_element(q.begin(), q.begin() + (k - 1), q.end(), greater);
    std::sort(q.begin(), q.begin() + (k - 1), greater);
  }
  std::vector<int32_t> out(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) out[static_cast<size_t>(i)] = static_cast<int32_t>(q[static_cast<size_t>(i)].second);
  return out;
}

}  // namespace fp4lm::model
