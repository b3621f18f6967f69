#include "model/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "model/activation.h"

namespace fp4lm::model {

void route_topk(const float* logits, int64_t m, int64_t num_experts, int64_t top_k, bool renormalize,
                DType act, int32_t* ids, float* weights) {
  if (top_k <= 0 || top_k > num_experts) fail("MoE routing: top_k {} outside [1, {}]", top_k, num_experts);
  std::vector<float> prob(static_cast<size_t>(num_experts));
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t i = 0; i < m; ++i) {
    const float* l = logits + i * num_experts;
    float mx = -INFINITY;
    for (int64_t e = 0; e < num_experts; ++e) mx = std::max(mx, l[e]);
    double sum = 0;
    for (int64_t e = 0; e < num_experts; ++e) sum += std::exp(static_cast<double>(l[e]) - mx);
    for (int64_t e = 0; e < num_experts; ++e)
      prob[e] = static_cast<float>(std::exp(static_cast<double>(l[e]) - mx) / sum);
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
      return prob[a] != prob[b] ? prob[a] > prob[b] : a < b;
    });
    float total = 0;
    for (int64_t j = 0; j < top_k; ++j) total += prob[order[j]];
    for (int64_t j = 0; j < top_k; ++j) {
      ids[i * top_k + j] = order[j];
      weights[i * top_k + j] = renormalize ? prob[order[j]] / total : prob[order[j]];
    }
    round_to_dtype(weights + i * top_k, static_cast<size_t>(top_k), act);
  }
}

}  // namespace fp4lm::model
