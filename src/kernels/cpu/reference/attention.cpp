// The reference attention variant: the numerical definition of kernels/attention.h in plain
// scalar code, one query head at a time (the loop structure of the attention fp4lm had before the
// kernel: cached rows converted to float32 64 at a time through a buffer, dot products in 8
// partial sums). The baseline the vector variants are tested and benchmarked against.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "core/dtype.h"
#include "kernels/attention.h"

namespace fp4lm::kernels::cpu {

namespace {

constexpr int64_t kBlock = 64;  // cached rows converted at a time

// Eight independent partial sums, then a fixed tree.
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The 256 E4M3 codes as float32.
const float* e4m3_table() {
  static const auto table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[c] = e4m3_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

// Rows [t0, t0 + n) of a cached plane as float32: a direct pointer for F32, else converted into
// `buf` (FP8: code × scale).
const float* rows_f32(const uint8_t* plane, DType dt, int64_t hd, int64_t t0, int64_t n, std::vector<float>& buf,
                      float scale) {
  if (dt == DType::F32) return reinterpret_cast<const float*>(plane) + t0 * hd;
  buf.resize(static_cast<size_t>(n * hd));
  if (dt == DType::F8_E4M3) {
    const float* lut = e4m3_table();
    const uint8_t* src = plane + t0 * hd;
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = lut[src[i]] * scale;
  } else {
    to_f32_n(plane + static_cast<size_t>(t0 * hd) * dtype_size(dt), dt, buf.data(), buf.size());
  }
  return buf.data();
}

// Positions [t0, t0 + n) of the call's plane: rows_f32 of their rows, or, where they wrap around a
// sliding window's ring, both pieces converted (or copied) into `buf` in position order.
const float* ring_rows_f32(const AttentionCall& c, const uint8_t* plane, int64_t t0, int64_t n, std::vector<float>& buf,
                           float scale) {
  const int64_t hd = c.head_dim;
  if (c.ring_rows == 0) return rows_f32(plane, c.kv_dtype, hd, t0, n, buf, scale);
  const int64_t r0 = (c.ring_first + t0) % c.ring_rows, head = std::min(n, c.ring_rows - r0);
  if (head == n) return rows_f32(plane, c.kv_dtype, hd, r0, n, buf, scale);
  std::vector<float> piece;
  std::vector<float> out(static_cast<size_t>(n * hd));
  const float* a = rows_f32(plane, c.kv_dtype, hd, r0, head, piece, scale);
  std::copy_n(a, head * hd, out.begin());
  const float* b = rows_f32(plane, c.kv_dtype, hd, 0, n - head, piece, scale);
  std::copy_n(b, (n - head) * hd, out.begin() + head * hd);
  buf = std::move(out);
  return buf.data();
}

}  // namespace

void attention_reference(const AttentionCall& c, float* /*scratch*/) {
  const int64_t hd = c.head_dim;
  const float ck = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  std::vector<float> w, kbuf, vbuf, acc(static_cast<size_t>(hd));
  for (int64_t i = 0; i < c.rows; ++i) {
    const int64_t len = c.pos0 + i + 1;
    w.resize(static_cast<size_t>(len));
    for (int64_t j = 0; j < c.group; ++j) {
      const float* q = c.q + i * c.q_stride + j * hd;
      float mx = -INFINITY;
      for (int64_t t0 = 0; t0 < len; t0 += kBlock) {
        const int64_t n = std::min(kBlock, len - t0);
        const float* k = ring_rows_f32(c, c.keys, t0, n, kbuf, c.k_scale);
        for (int64_t t = 0; t < n; ++t) {
          w[t0 + t] = dot(q, k + t * hd, hd) * ck;
          mx = std::max(mx, w[t0 + t]);
        }
      }
      if (c.sinks) mx = std::max(mx, c.sinks[j]);
      float sum = 0.0f;
      for (int64_t t = 0; t < len; ++t) {
        w[t] = std::exp(w[t] - mx);
        sum += w[t];
      }
      if (c.sinks) sum += std::exp(c.sinks[j] - mx);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t t0 = 0; t0 < len; t0 += kBlock) {
        const int64_t n = std::min(kBlock, len - t0);
        const float* v = ring_rows_f32(c, c.values, t0, n, vbuf, c.v_scale);
        for (int64_t t = 0; t < n; ++t)
          for (int64_t d = 0; d < hd; ++d) acc[d] += w[t0 + t] * v[t * hd + d];
      }
      const float r = 1.0f / sum;
      float* o = c.out + i * c.out_stride + j * hd;
      for (int64_t d = 0; d < hd; ++d) o[d] = acc[d] * r;
    }
  }
}

}  // namespace fp4lm::kernels::cpu
