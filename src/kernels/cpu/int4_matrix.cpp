#include "kernels/cpu/int4_matrix.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/reference/math.h"

namespace fp4lm::kernels::cpu {

Int4Matrix prepare_int4_matrix(LinearWeights w) {
  const std::string name = w.shards.empty() ? std::string("?") : w.shards[0].name;
  if (w.key.weight != WeightKey::int4)
    fail("int4 CPU kernel: layer {} is not int4 (weight scheme {})", name, weight_key_name(w.key.weight));
  check_int4_weights(w);
  Int4Matrix m;
  m.n = w.n;
  m.k = w.k;
  for (WeightShard& s : w.shards) {
    Int4View& v = s.as<Int4View>();
    if (m.group == 0) m.group = v.group;
    if (v.group != m.group)
      fail("int4 layer {}: shard {} has group size {}, the layer's first shard {}", name, s.name, v.group, m.group);
    if (v.group % 16 != 0)
      fail("int4 CPU kernel: {} has group size {}; the kernels need a multiple of 16", s.name, v.group);
    if (m.codes.empty()) {
      m.codes = std::move(v.codes);
      m.scales = std::move(v.scales);
    } else {
      m.codes.insert(m.codes.end(), v.codes.begin(), v.codes.end());
      m.scales.insert(m.scales.end(), v.scales.begin(), v.scales.end());
    }
    const auto same = std::find(m.perms.begin(), m.perms.end(), v.perm);
    m.shard_perm.push_back(static_cast<int>(same - m.perms.begin()));
    if (same == m.perms.end()) m.perms.push_back(std::move(v.perm));
    m.shard_end.push_back((m.shard_end.empty() ? 0 : m.shard_end.back()) + s.rows);
    for (uint8_t z : v.zeros) m.zeros.push_back(static_cast<float>(z));
  }
  if (!w.bias.empty() && static_cast<int64_t>(w.bias.size()) != w.n)
    fail("int4 layer {}: bias has {} elements, expected {}", name, w.bias.size(), w.n);
  m.bias = std::move(w.bias);
  m.weight_bytes = m.codes.size() + m.scales.size() * sizeof(float) + m.zeros.size() * sizeof(float);
  m.keepalive = std::move(w.keepalive);
  return m;
}

std::vector<float> int4_input(const void* x, DType act, int64_t m, int64_t k, const std::vector<int32_t>& perm) {
  std::vector<float> out(static_cast<size_t>(m * k));
  to_f32_n(x, act, out.data(), out.size());
  if (perm.empty()) return out;
  std::vector<float> gathered(out.size());
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < k; ++j) gathered[t * k + j] = out[t * k + perm[static_cast<size_t>(j)]];
  return gathered;
}

Int4Rows int4_rows_view(const Int4Matrix& m) {
  Int4Rows r{m.codes.data(), m.scales.data(), m.zeros.data(), m.bias.empty() ? nullptr : m.bias.data(),
             m.n,            m.k,             m.group};
  r.groups = m.k / m.group;
  return r;
}

}  // namespace fp4lm::kernels::cpu
