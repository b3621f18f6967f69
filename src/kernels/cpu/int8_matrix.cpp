// int8 layers in the prepared form the W8A16 row kernels take (Fp8Matrix: the checkpoint's codes
// in place, a row table across fused shards, each row's weight_scale).
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/int8_kernels.h"
#include "kernels/cpu/reference/math.h"

namespace fp4lm::kernels::cpu {

Fp8Matrix prepare_int8_matrix(LinearWeights w) {
  const std::string name = w.shards.empty() ? std::string("?") : w.shards[0].name;
  if (w.key.weight != WeightKey::int8)
    fail("int8 CPU kernel: layer {} is not int8 (weight scheme {})", name, weight_key_name(w.key.weight));
  check_int8_weights(w);
  Fp8Matrix m;
  m.n = w.n;
  m.k = w.k;
  m.row_codes.reserve(w.n);
  m.row_scale256.reserve(w.n);
  for (const WeightShard& s : w.shards) {
    const Int8View& v = s.as<Int8View>();
    for (int64_t r = 0; r < s.rows; ++r) {
      m.row_codes.push_back(reinterpret_cast<const uint8_t*>(v.codes) + r * w.k);
      m.row_scale256.push_back(v.row_scales[static_cast<size_t>(r)]);  // int8 decodes to itself: no 256
    }
  }
  if (!w.bias.empty() && static_cast<int64_t>(w.bias.size()) != w.n)
    fail("int8 layer {}: bias has {} elements, expected {}", name, w.bias.size(), w.n);
  m.bias = std::move(w.bias);
  m.weight_bytes = static_cast<size_t>(w.n * w.k + w.n * 4);
  m.keepalive = std::move(w.keepalive);
  return m;
}

}  // namespace fp4lm::kernels::cpu
