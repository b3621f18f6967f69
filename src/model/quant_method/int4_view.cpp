#include "model/quant_method/int4_view.h"

#include <algorithm>
#include <numeric>

namespace fp4lm::model {

std::vector<int32_t> act_order_permutation(const std::vector<int32_t>& g_idx, int64_t k, int64_t group,
                                           const std::string& where) {
  if (g_idx.empty()) return {};
  const int64_t groups = k / group;
  bool trivial = true;
  std::vector<int64_t> count(static_cast<size_t>(groups), 0);
  for (int64_t j = 0; j < k; ++j) {
    const int32_t g = g_idx[static_cast<size_t>(j)];
    if (g < 0 || g >= groups)
      fail("{}: column {} is in group {}, expected 0..{} ({} columns in groups of {})", where, j, g, groups - 1, k,
           group);
    ++count[static_cast<size_t>(g)];
    trivial &= g == j / group;
  }
  if (trivial) return {};
  for (int64_t g = 0; g < groups; ++g)
    if (count[static_cast<size_t>(g)] != group)
      fail("{}: group {} holds {} columns, expected {} (every group the same size)", where, g,
           count[static_cast<size_t>(g)], group);
  std::vector<int32_t> perm(static_cast<size_t>(k));
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](int32_t a, int32_t b) { return g_idx[a] < g_idx[b]; });
  return perm;
}

std::vector<int32_t> int32_values(const TensorView& t) {
  std::vector<int32_t> v(static_cast<size_t>(t.numel()));
  std::memcpy(v.data(), t.data, v.size() * sizeof(int32_t));
  return v;
}

std::vector<float> float_values(const TensorView& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  to_f32_n(t.data, t.dtype, v.data(), v.size());
  return v;
}

}  // namespace fp4lm::model
