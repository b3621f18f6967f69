#include "kernels/cpu/nvfp4_matrix.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace fp4lm::kernels::cpu {

namespace {
// A NaN block scale would decode differently in the SIMD and the scalar E4M3 conversions; it is
// a corrupt checkpoint, so it is rejected at load (one pass over k/16 bytes per row).
void check_block_scales(const WeightShard& s, const Nvfp4View& v, int64_t k) {
  const size_t count = static_cast<size_t>(s.rows * (k / 16));
  for (size_t i = 0; i < count; ++i) {
    if ((v.block_scales[i] & 0x7f) == 0x7f)
      fail("{}: weight_scale element [{}, {}] is the E4M3 NaN byte 0x{:02X}", s.name, i / (k / 16),
           i % (k / 16), v.block_scales[i]);
  }
}
}  // namespace

Nvfp4Matrix prepare_nvfp4_matrix(LinearWeights w, bool need_input_scale) {
  if (w.key.weight != WeightKey::nvfp4_static)
    fail("NVFP4 CPU kernel: layer {} is not NVFP4 (weight scheme {})",
         w.shards.empty() ? std::string("?") : w.shards[0].name, weight_key_name(w.key.weight));
  if (w.n <= 0 || w.k <= 0 || w.k % 16 != 0)
    fail("NVFP4 layer {}: shape [{}, {}] needs n > 0 and k a positive multiple of 16",
         w.shards.empty() ? std::string("?") : w.shards[0].name, w.n, w.k);
  Nvfp4Matrix m;
  m.n = w.n;
  m.k = w.k;
  m.row_codes.reserve(w.n);
  m.row_scales.reserve(w.n);
  m.row_global.reserve(w.n);
  int64_t rows = 0;
  for (const WeightShard& s : w.shards) {
    if (s.rows < 0) fail("{}: negative row count {}", s.name, s.rows);
    const Nvfp4View& v = s.as<Nvfp4View>();
    if (s.rows > 0 && (!v.codes || !v.block_scales))
      fail("{}: NVFP4 shard lacks its weight codes or weight_scale", s.name);
    if (!std::isfinite(v.global_scale))
      fail("{}: weight_scale_2 is {}, expected a finite value", s.name, v.global_scale);
    check_block_scales(s, v, w.k);
    for (int64_t r = 0; r < s.rows; ++r) {
      m.row_codes.push_back(v.codes + r * (w.k / 2));
      m.row_scales.push_back(v.block_scales + r * (w.k / 16));
      m.row_global.push_back(v.global_scale);
    }
    rows += s.rows;
  }
  if (rows != w.n)
    fail("NVFP4 layer {}: shards hold {} rows, expected n = {}",
         w.shards.empty() ? std::string("?") : w.shards[0].name, rows, w.n);
  if (!w.bias.empty() && static_cast<int64_t>(w.bias.size()) != w.n)
    fail("NVFP4 layer {}: bias has {} elements, expected {}", w.shards[0].name, w.bias.size(), w.n);
  if (need_input_scale && !w.per_token_input_scale && !(std::isfinite(w.input_scale) && w.input_scale > 0.0f))
    fail("NVFP4 W4A4 layer {}: input_scale is {}, expected a finite value > 0", w.shards[0].name,
         w.input_scale);
  m.bias = std::move(w.bias);
  m.input_scale = w.input_scale;
  m.per_token_input_scale = w.per_token_input_scale;
  m.weight_bytes = static_cast<size_t>(w.n * (w.k / 2 + w.k / 16));
  m.keepalive = std::move(w.keepalive);
  return m;
}

}  // namespace fp4lm::kernels::cpu
