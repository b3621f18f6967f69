#include "model/layers/moe_router.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "model/layers/activation.h"

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

namespace fp4lm::model {

void route_sigmoid_topk(const float* logits, const float* bias, int64_t m, int64_t num_experts, int64_t top_k,
                        const SigmoidRouting& rule, DType weight_dtype, int32_t* ids, float* weights) {
  const int64_t groups = rule.n_group;
  if (groups <= 0 || num_experts % groups != 0)
    fail("MoE routing: n_group ({}) must divide the {} experts", groups, num_experts);
  const int64_t per_group = num_experts / groups;
  if (groups > 1 && per_group < 2)
    fail("MoE routing: each of the n_group={} groups needs at least 2 experts, found {}", groups, per_group);
  if (rule.topk_group <= 0 || rule.topk_group > groups)
    fail("MoE routing: topk_group ({}) outside [1, n_group={}]", rule.topk_group, groups);
  if (top_k <= 0 || top_k > rule.topk_group * per_group)
    fail("MoE routing: top_k {} outside [1, {}] (topk_group {} × {} experts per group)", top_k,
         rule.topk_group * per_group, rule.topk_group, per_group);
  std::vector<float> score(static_cast<size_t>(num_experts)), choice(score.size());
  std::vector<float> group_score(static_cast<size_t>(groups));
  std::vector<int32_t> order(score.size()), group_order(group_score.size());
  std::vector<char> group_kept(group_score.size());
  for (int64_t i = 0; i < m; ++i) {
    const float* l = logits + i * num_experts;
    for (int64_t e = 0; e < num_experts; ++e) {
      score[e] = 1.0f / (1.0f + std::exp(-l[e]));
      choice[e] = score[e] + (bias ? bias[e] : 0.0f);
    }
    // Group-limited selection: a group's score is the sum of its two best biased scores.
    std::fill(group_kept.begin(), group_kept.end(), char{1});
    if (groups > 1) {
      for (int64_t g = 0; g < groups; ++g) {
        float best = -INFINITY, second = -INFINITY;
        for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
          if (choice[e] > best) {
            second = best;
            best = choice[e];
          } else if (choice[e] > second) {
            second = choice[e];
          }
        }
        group_score[g] = best + second;
      }
      std::iota(group_order.begin(), group_order.end(), 0);
      std::partial_sort(group_order.begin(), group_order.begin() + rule.topk_group, group_order.end(),
                        [&](int32_t a, int32_t b) {
                          return group_score[a] != group_score[b] ? group_score[a] > group_score[b] : a < b;
                        });
      std::fill(group_kept.begin(), group_kept.end(), char{0});
      for (int64_t g = 0; g < rule.topk_group; ++g) group_kept[group_order[g]] = 1;
    }
    order.clear();
    for (int64_t e = 0; e < num_experts; ++e)
      if (group_kept[e / per_group]) order.push_back(static_cast<int32_t>(e));
    std::partial_sort(order.begin(), order.begin() + top_k, order.end(), [&](int32_t a, int32_t b) {
      return choice[a] != choice[b] ? choice[a] > choice[b] : a < b;
    });
    float total = 0;
    for (int64_t j = 0; j < top_k; ++j) total += score[order[j]];
    const float scale = static_cast<float>(rule.scaling);
    for (int64_t j = 0; j < top_k; ++j) {
      ids[i * top_k + j] = order[j];
      const float w = rule.renormalize ? score[order[j]] / (total + 1e-20f) : score[order[j]];
      weights[i * top_k + j] = w * scale;
    }
    round_to_dtype(weights + i * top_k, static_cast<size_t>(top_k), weight_dtype);
  }
}

}  // namespace fp4lm::model
