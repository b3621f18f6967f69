#include "kernels/cpu/dense_matrix.h"

#include "core/error.h"

namespace fp4lm::kernels::cpu {

DenseMatrix prepare_dense_matrix(LinearWeights w) {
  const std::string layer = w.shards.empty() ? std::string("?") : w.shards[0].name;
  if (w.key.weight != WeightKey::unquantized)
    fail("dense CPU kernel: layer {} is not unquantized (weight scheme {})", layer,
         weight_key_name(w.key.weight));
  if (w.n <= 0 || w.k <= 0) fail("dense layer {}: shape [{}, {}] needs n > 0 and k > 0", layer, w.n, w.k);
  DenseMatrix m;
  m.n = w.n;
  m.k = w.k;
  int64_t rows = 0;
  for (const WeightShard& s : w.shards) {
    if (s.rows < 0) fail("{}: negative row count {}", s.name, s.rows);
    const DenseView& v = s.as<DenseView>();
    if (v.dtype != DType::F32 && v.dtype != DType::BF16 && v.dtype != DType::F16)
      fail("{}: dense weight dtype {}, expected F32, BF16 or F16", s.name, dtype_name(v.dtype));
    if (s.rows > 0 && !v.data) fail("{}: dense shard lacks its weight data", s.name);
    if (s.rows > 0) m.segments.push_back({rows, s.rows, v.dtype, static_cast<const uint8_t*>(v.data)});
    m.weight_bytes += static_cast<size_t>(s.rows * w.k) * dtype_size(v.dtype);
    rows += s.rows;
  }
  if (rows != w.n) fail("dense layer {}: shards hold {} rows, expected n = {}", layer, rows, w.n);
  if (!w.bias.empty() && static_cast<int64_t>(w.bias.size()) != w.n)
    fail("dense layer {}: bias has {} elements, expected {}", layer, w.bias.size(), w.n);
  m.bias = std::move(w.bias);
  m.keepalive = std::move(w.keepalive);
  return m;
}

}  // namespace fp4lm::kernels::cpu
