#include "engine/best_of.h"

#include <algorithm>
#include <numeric>

namespace fp4lm::engine {

std::vector<size_t> best_of_order(const std::vector<double>& cumulative_logprobs, size_t n) {
  std::vector<size_t> order(cumulative_logprobs.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return cumulative_logprobs[a] > cumulative_logprobs[b]; });
  order.resize(std::min(n, order.size()));
  return order;
}

}  // namespace fp4lm::engine
