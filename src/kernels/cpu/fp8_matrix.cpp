#include "kernels/cpu/fp8_matrix.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace fp4lm::kernels::cpu {

namespace {
// 0x7F / 0xFF are E4M3's NaN; the kernels' fp16 route would read them as ±480, so a corrupt
// checkpoint is rejected at load (one pass over the codes, which also pages them in).
void check_codes(const WeightShard& s, const uint8_t* codes, int64_t k) {
  const size_t count = static_cast<size_t>(s.rows * k);
  uint8_t any = 0;
  for (size_t i = 0; i < count; ++i) any |= static_cast<uint8_t>((codes[i] & 0x7f) == 0x7f);
  if (!any) return;
  for (size_t i = 0; i < count; ++i)
    if ((codes[i] & 0x7f) == 0x7f)
      fail("{}: weight element [{}, {}] is the E4M3 NaN byte 0x{:02X}", s.name, i / k, i % k, codes[i]);
}
}  // namespace

Fp8Matrix prepare_fp8_matrix(LinearWeights w) {
  const std::string name = w.shards.empty() ? std::string("?") : w.shards[0].name;
  if (w.key.weight != WeightKey::fp8_static)
    fail("FP8 CPU kernel: layer {} is not FP8 (weight scheme {})", name, weight_key_name(w.key.weight));
  if (w.n <= 0 || w.k <= 0) fail("FP8 layer {}: shape [{}, {}] needs n > 0 and k > 0", name, w.n, w.k);
  Fp8Matrix m;
  m.n = w.n;
  m.k = w.k;
  m.row_codes.reserve(w.n);
  m.row_scale256.reserve(w.n);
  int64_t rows = 0;
  for (const WeightShard& s : w.shards) {
    const Fp8View& v = s.as<Fp8View>();
    if (s.rows < 0) fail("{}: negative row count {}", s.name, s.rows);
    if (s.rows > 0 && !v.codes) fail("{}: FP8 shard lacks its weight codes", s.name);
    if (s.rows > 0) check_codes(s, v.codes, w.k);
    if (!v.row_scales.empty() && static_cast<int64_t>(v.row_scales.size()) != s.rows)
      fail("{}: per-channel weight_scale has {} entries, expected {}", s.name, v.row_scales.size(), s.rows);
    for (int64_t r = 0; r < s.rows; ++r) {
      const float scale = v.row_scales.empty() ? v.global_scale : v.row_scales[static_cast<size_t>(r)];
      if (!(std::isfinite(scale) && scale > 0.0f && scale < 1e30f))
        fail("{}: weight_scale of row {} is {}, expected a finite value > 0", s.name, r, scale);
      m.row_codes.push_back(v.codes + r * w.k);
      m.row_scale256.push_back(scale * 256.0f);
    }
    rows += s.rows;
  }
  if (rows != w.n) fail("FP8 layer {}: shards hold {} rows, expected n = {}", name, rows, w.n);
  if (!w.bias.empty() && static_cast<int64_t>(w.bias.size()) != w.n)
    fail("FP8 layer {}: bias has {} elements, expected {}", name, w.bias.size(), w.n);
  m.bias = std::move(w.bias);
  m.weight_bytes = static_cast<size_t>(w.n * w.k);
  m.keepalive = std::move(w.keepalive);
  return m;
}

int significant_bits(float v) {
  if (!(std::isnormal(v))) return 24;
  uint32_t b;
  std::memcpy(&b, &v, 4);
  const uint32_t mant = (b & 0x7fffffu) | 0x800000u;  // the implicit leading 1
  return 24 - std::countr_zero(mant);
}

int fp8_block_pieces(DType act, int scale_bits) {
  const int x_bits = act == DType::BF16 ? 8 : act == DType::F16 ? 11 : 24;
  const int bits = scale_bits == 1 ? x_bits : x_bits + scale_bits;
  return std::min(3, (bits + 7) / 8);
}

Fp8Matrix prepare_fp8_block_matrix(LinearWeights w) {
  const std::string name = w.shards.empty() ? std::string("?") : w.shards[0].name;
  if (w.key.weight != WeightKey::fp8_block)
    fail("block-FP8 CPU kernel: layer {} is not block-wise FP8 (weight scheme {})", name, weight_key_name(w.key.weight));
  if (w.n <= 0 || w.k <= 0) fail("block-FP8 layer {}: shape [{}, {}] needs n > 0 and k > 0", name, w.n, w.k);
  Fp8Matrix m;
  m.n = w.n;
  m.k = w.k;
  m.row_codes.reserve(w.n);
  m.row_scale256.assign(static_cast<size_t>(w.n), 256.0f);
  m.row_block_scales.reserve(w.n);
  m.weight_bytes = static_cast<size_t>(w.n * w.k);
  m.scale_bits = 1;
  int64_t rows = 0;
  for (WeightShard& s : w.shards) {
    Fp8BlockView& v = s.as<Fp8BlockView>();
    if (s.rows < 0) fail("{}: negative row count {}", s.name, s.rows);
    if (v.block_n <= 0 || v.block_k <= 0) fail("{}: block size [{}, {}] must be positive", s.name, v.block_n, v.block_k);
    if (m.block_k == 0) m.block_k = v.block_k;
    if (v.block_k != m.block_k)
      fail("{}: block size along k {} differs from the layer's other shards' {}", s.name, v.block_k, m.block_k);
    const int64_t cols = (w.k + v.block_k - 1) / v.block_k, grid_rows = (s.rows + v.block_n - 1) / v.block_n;
    if (v.scale_cols != cols || static_cast<int64_t>(v.scales.size()) != grid_rows * cols)
      fail("{}: block scales hold {} values in {} columns, expected [{}, {}]", s.name, v.scales.size(), v.scale_cols,
           grid_rows, cols);
    for (size_t i = 0; i < v.scales.size(); ++i) {
      if (!(std::isfinite(v.scales[i]) && v.scales[i] > 0.0f && v.scales[i] < 1e30f))
        fail("{}: block scale [{}, {}] is {}, expected a finite value > 0", s.name, i / cols, i % cols, v.scales[i]);
      m.scale_bits = std::max(m.scale_bits, significant_bits(v.scales[i]));
    }
    if (s.rows > 0 && !v.codes) fail("{}: block-FP8 shard lacks its weight codes", s.name);
    if (s.rows > 0) check_codes(s, v.codes, w.k);
    m.block_scales.push_back(std::move(v.scales));
    const float* grid = m.block_scales.back().data();
    for (int64_t r = 0; r < s.rows; ++r) {
      m.row_codes.push_back(v.codes + r * w.k);
      m.row_block_scales.push_back(grid + (r / v.block_n) * cols);
    }
    m.weight_bytes += m.block_scales.back().size() * sizeof(float);
    rows += s.rows;
  }
  if (rows != w.n) fail("block-FP8 layer {}: shards hold {} rows, expected n = {}", name, rows, w.n);
  if (!w.bias.empty() && static_cast<int64_t>(w.bias.size()) != w.n)
    fail("block-FP8 layer {}: bias has {} elements, expected {}", name, w.bias.size(), w.n);
  m.bias = std::move(w.bias);
  m.keepalive = std::move(w.keepalive);
  return m;
}

Fp8Input fp8_input(const void* x, DType act, int64_t m, int64_t k) {
  Fp8Input in;
  in.m = m;
  in.k = k;
  in.kp = (k + 31) / 32 * 32;
  in.x.assign(static_cast<size_t>(m * in.kp), 0.0f);
  const size_t es = dtype_size(act);
  for (int64_t t = 0; t < m; ++t)
    to_f32_n(static_cast<const uint8_t*>(x) + t * k * es, act, in.x.data() + t * in.kp, static_cast<size_t>(k));
  return in;
}

}  // namespace fp4lm::kernels::cpu
