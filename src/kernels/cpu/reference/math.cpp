#include "kernels/cpu/reference/math.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "quant/mxfp4.h"
#include "quant/fp8_tensor.h"
#include "quant/int8.h"
#include "quant/mxfp8.h"
#include "quant/nvfp4.h"

namespace fp4lm::kernels {

namespace {
// The shard holding row r, and r's index inside it.
const WeightShard& shard_of(const LinearWeights& w, int64_t& r) {
  for (const WeightShard& s : w.shards) {
    if (r < s.rows) return s;
    r -= s.rows;
  }
  fail("row index past the {} rows of the layer", w.n);
}
}  // namespace

void reference_weight_row(const LinearWeights& w, int64_t r, float* out) {
  const int64_t k = w.k;
  const WeightShard& s = shard_of(w, r);
  switch (w.key.weight) {
    case WeightKey::unquantized: {
      const DenseView& v = s.as<DenseView>();
      const size_t esize = dtype_size(v.dtype);
      to_f32_n(static_cast<const uint8_t*>(v.data) + r * k * esize, v.dtype, out, k);
      return;
    }
    case WeightKey::nvfp4_static: {
      const Nvfp4View& v = s.as<Nvfp4View>();
      const uint8_t* codes = v.codes + r * (k / 2);
      const uint8_t* scales = v.block_scales + r * (k / 16);
      for (int64_t j = 0; j < k; ++j) {
        uint8_t c = (j & 1) ? codes[j / 2] >> 4 : codes[j / 2] & 0xf;
        out[j] = e2m1_to_f32(c) * e4m3_to_f32(scales[j / 16]) * v.global_scale;
      }
      return;
    }
    case WeightKey::fp8_static: {
      const Fp8View& v = s.as<Fp8View>();
      const uint8_t* codes = v.codes + r * k;
      const float scale = v.row_scales.empty() ? v.global_scale : v.row_scales[static_cast<size_t>(r)];
      for (int64_t j = 0; j < k; ++j) out[j] = e4m3_to_f32(codes[j]) * scale;
      return;
    }
    case WeightKey::mxfp4: {
      const Mxfp4View& v = s.as<Mxfp4View>();
      const std::vector<float> row = quant::dequantize_mxfp4(v.codes + r * (k / 2), v.scales + r * (k / 32), 1, k);
      std::copy(row.begin(), row.end(), out);
      return;
    }
    case WeightKey::int4: {
      const Int4View& v = s.as<Int4View>();
      const int64_t groups = k / v.group;
      const uint8_t* codes = v.codes.data() + r * (k / 2);
      for (int64_t j = 0; j < k; ++j) {
        const int c = (j & 1) ? codes[j / 2] >> 4 : codes[j / 2] & 0xf;
        const int64_t g = r * groups + j / v.group;
        out[v.perm.empty() ? j : v.perm[static_cast<size_t>(j)]] = static_cast<float>(c - v.zeros[g]) * v.scales[g];
      }
      return;
    }
    case WeightKey::fp8_block: {
      const Fp8BlockView& v = s.as<Fp8BlockView>();
      const uint8_t* codes = v.codes + r * k;
      const float* scales = v.scales.data() + (r / v.block_n) * v.scale_cols;
      for (int64_t j = 0; j < k; ++j) out[j] = e4m3_to_f32(codes[j]) * scales[j / v.block_k];
      return;
    }
    case WeightKey::int8: {
      const Int8View& v = s.as<Int8View>();
      const int8_t* codes = v.codes + r * k;
      const float scale = v.row_scales[static_cast<size_t>(r)];
      for (int64_t j = 0; j < k; ++j) out[j] = static_cast<float>(codes[j]) * scale;
      return;
    }
  }
}

std::vector<float> fp8_group_qdq_activation(const float* x, int64_t m, int64_t k, int64_t group) {
  if (group <= 0) fail("per-token-group FP8 activation quantization: group size {} must be positive", group);
  std::vector<float> out(static_cast<size_t>(m * k));
  for (int64_t t = 0; t < m; ++t)
    for (int64_t g0 = 0; g0 < k; g0 += group) {
      const int64_t g1 = std::min(k, g0 + group);
      const float* xi = x + t * k;
      float amax = 0.0f;
      for (int64_t j = g0; j < g1; ++j) amax = std::max(amax, std::fabs(xi[j]));
      const float s = std::max(amax, 1e-10f) / 448.0f;
      for (int64_t j = g0; j < g1; ++j)
        out[t * k + j] = e4m3_to_f32(f32_to_e4m3(std::clamp(xi[j] / s, -448.0f, 448.0f))) * s;
    }
  return out;
}

std::vector<float> reference_activation_input(const LinearWeights& w, const float* x, int64_t m) {
  const size_t count = static_cast<size_t>(m * w.k);
  if (w.key.act == ActKey::nvfp4_dynamic)
    return w.per_token_input_scale ? quant::qdq_activation_per_token(x, m, w.k)
                                   : quant::qdq_activation(x, m, w.k, w.input_scale);
  if (w.key.act == ActKey::fp8_group_dynamic) {
    if (w.shards.empty()) fail("per-token-group FP8 activations: the layer has no shards");
    // Per-tensor / per-channel FP8 weights (FP8_PER_CHANNEL_PER_TOKEN): one group per token.
    if (w.key.weight == WeightKey::fp8_static) return fp8_group_qdq_activation(x, m, w.k, w.k);
    return fp8_group_qdq_activation(x, m, w.k, w.shards[0].as<Fp8BlockView>().block_k);
  }
  std::vector<float> out(x, x + count);
  if (w.key.act == ActKey::mxfp8_dynamic) {
    for (int64_t t = 0; t < m; ++t) quant::mxfp8_qdq_row(out.data() + t * w.k, w.k);
    return out;
  }
  if (w.key.act == ActKey::int8_static) {
    if (!(std::isfinite(w.input_scale) && w.input_scale > 0))
      fail("int8 activations: input_scale {} must be finite and positive", w.input_scale);
    for (float& v : out) v = quant::int8_qdq(v, w.input_scale);
    return out;
  }
  if (w.key.act == ActKey::fp8_static) {
    for (float& v : out) v = e4m3_to_f32(f32_to_e4m3(v / w.input_scale)) * w.input_scale;
  }
  if (w.key.act == ActKey::fp8_tensor_dynamic) {
    // One scale for the whole input (ModelOpt's per-tensor quantizer without a calibrated amax).
    float amax = 0.0f;
    for (float v : out) amax = std::max(amax, std::fabs(v));
    quant::fp8_qdq_dynamic_tensor(out.data(), out.size(), amax);
  }
  return out;
}

void check_int8_weights(const LinearWeights& w) {
  const std::string layer = w.shards.empty() ? std::string("?") : w.shards[0].name;
  if (w.n <= 0 || w.k <= 0) fail("int8 layer {}: shape [{}, {}] needs n > 0 and k > 0", layer, w.n, w.k);
  int64_t rows = 0;
  for (const WeightShard& s : w.shards) {
    const Int8View& v = s.as<Int8View>();
    if (s.rows > 0 && !v.codes) fail("{}: int8 shard lacks its weight codes", s.name);
    if (static_cast<int64_t>(v.row_scales.size()) != s.rows)
      fail("{}: int8 weight_scale has {} entries, expected one per row ({})", s.name, v.row_scales.size(), s.rows);
    for (size_t r = 0; r < v.row_scales.size(); ++r)
      if (!(std::isfinite(v.row_scales[r]) && v.row_scales[r] > 0.0f))
        fail("{}: int8 weight_scale of row {} is {}, expected a finite value > 0", s.name, r, v.row_scales[r]);
    rows += s.rows;
  }
  if (rows != w.n) fail("int8 layer {}: shards hold {} rows, expected n = {}", layer, rows, w.n);
  if (w.key.act == ActKey::int8_static && !(std::isfinite(w.input_scale) && w.input_scale > 0))
    fail("int8 W8A8 layer {}: input_scale is {}, expected a finite value > 0", layer, w.input_scale);
}

void check_int4_weights(const LinearWeights& w) {
  const std::string layer = w.shards.empty() ? std::string("?") : w.shards[0].name;
  if (w.n <= 0 || w.k <= 0 || w.k % 2 != 0)
    fail("int4 layer {}: shape [{}, {}] needs n > 0 and k a positive even number", layer, w.n, w.k);
  int64_t rows = 0;
  for (const WeightShard& s : w.shards) {
    const Int4View& v = s.as<Int4View>();
    if (v.group <= 0 || w.k % v.group != 0)
      fail("{}: int4 group size {} does not divide the input width {}", s.name, v.group, w.k);
    const size_t groups = static_cast<size_t>(s.rows * (w.k / v.group));
    if (v.codes.size() != static_cast<size_t>(s.rows * (w.k / 2)) || v.scales.size() != groups ||
        v.zeros.size() != groups)
      fail("{}: int4 arrays hold {} code bytes, {} scales, {} zeros; expected {}, {}, {}", s.name, v.codes.size(),
           v.scales.size(), v.zeros.size(), s.rows * (w.k / 2), groups, groups);
    for (size_t i = 0; i < groups; ++i) {
      if (v.zeros[i] > 16) fail("{}: int4 zero point [{}] is {}, expected 0..16", s.name, i, v.zeros[i]);
      if (!std::isfinite(v.scales[i])) fail("{}: int4 scale [{}] is {}, expected a finite value", s.name, i, v.scales[i]);
    }
    if (!v.perm.empty()) {
      if (v.perm.size() != static_cast<size_t>(w.k))
        fail("{}: act-order permutation has {} entries, expected {}", s.name, v.perm.size(), w.k);
      std::vector<char> seen(static_cast<size_t>(w.k), 0);
      for (int32_t p : v.perm) {
        if (p < 0 || p >= w.k || seen[static_cast<size_t>(p)])
          fail("{}: act-order permutation is not a permutation of [0, {}) (entry {})", s.name, w.k, p);
        seen[static_cast<size_t>(p)] = 1;
      }
    }
    rows += s.rows;
  }
  if (rows != w.n) fail("int4 layer {}: shards hold {} rows, expected n = {}", layer, rows, w.n);
}

size_t linear_weight_bytes(const LinearWeights& w) {
  switch (w.key.weight) {
    case WeightKey::unquantized: {
      size_t b = 0;
      for (const WeightShard& s : w.shards) b += s.rows * w.k * dtype_size(s.as<DenseView>().dtype);
      return b;
    }
    case WeightKey::nvfp4_static: return static_cast<size_t>(w.n * (w.k / 2 + w.k / 16));
    case WeightKey::fp8_static: return static_cast<size_t>(w.n * w.k);
    case WeightKey::int8: return static_cast<size_t>(w.n * w.k + w.n * 4);  // codes + fp32 row scales
    case WeightKey::mxfp4: return static_cast<size_t>(w.n * (w.k / 2 + w.k / 32));
    case WeightKey::int4: {
      size_t b = static_cast<size_t>(w.n * (w.k / 2));
      for (const WeightShard& s : w.shards) b += s.as<Int4View>().scales.size() * 5;  // fp32 scale + u8 zero
      return b;
    }
    case WeightKey::fp8_block: {
      size_t b = static_cast<size_t>(w.n * w.k);
      for (const WeightShard& s : w.shards) b += s.as<Fp8BlockView>().scales.size() * sizeof(float);
      return b;
    }
  }
  return 0;
}

}  // namespace fp4lm::kernels
