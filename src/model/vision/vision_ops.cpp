#include "model/vision/vision_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/attention.h"

namespace fp4lm::model {

void vision_layer_norm(const float* x, int64_t rows, int64_t dim, const std::vector<float>& w,
                       const std::vector<float>& b, float eps, float* y, ThreadPool& pool) {
  pool.parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      double mean = 0;
      for (int64_t i = 0; i < dim; ++i) mean += xr[i];
      mean /= static_cast<double>(dim);
      double var = 0;
      for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
      var /= static_cast<double>(dim);
      const float m = static_cast<float>(mean), inv = static_cast<float>(1.0 / std::sqrt(var + eps));
      for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - m) * inv * w[static_cast<size_t>(i)] + b[static_cast<size_t>(i)];
    }
  });
}

void segment_attention(const float* q, const float* k, const float* v, int64_t row_stride, int64_t heads,
                       int64_t D, const std::vector<int64_t>& segments, float* out, ThreadPool& pool) {
  const int64_t H = heads * D, N = segments.back();
  // Regrouped per (segment, head) as the kernel reads them: [len, D] each.
  std::vector<float> qh(static_cast<size_t>(N * H)), kh(qh.size()), vh(qh.size()), oh(qh.size());
  auto seg_of = [&](int64_t r) {
    return static_cast<size_t>(std::upper_bound(segments.begin(), segments.end(), r) - segments.begin() - 1);
  };
  pool.parallel_for(N, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const size_t sg = seg_of(r);
      const int64_t s0 = segments[sg], len = segments[sg + 1] - s0;
      for (int64_t h = 0; h < heads; ++h) {
        const size_t dst = static_cast<size_t>(s0 * H + h * len * D + (r - s0) * D), src = static_cast<size_t>(r * row_stride + h * D);
        std::memcpy(qh.data() + dst, q + src, static_cast<size_t>(D) * sizeof(float));
        std::memcpy(kh.data() + dst, k + src, static_cast<size_t>(D) * sizeof(float));
        std::memcpy(vh.data() + dst, v + src, static_cast<size_t>(D) * sizeof(float));
      }
    }
  });
  // The causal kernel with every query row placed at the segment's last position, so that it
  // sees every key of the segment; kGroup rows of one head passed as one call's "group" (the
  // kernel streams the head's keys and values once per block of rows).
  constexpr int64_t kGroup = 32;
  const kernels::AttentionKernel& kernel = kernels::attention_kernel();
  for (size_t sg = 0; sg + 1 < segments.size(); ++sg) {
    const int64_t s0 = segments[sg], len = segments[sg + 1] - s0, blocks = (len + kGroup - 1) / kGroup;
    pool.parallel_for(heads * blocks, [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t h = i / blocks, r0 = (i % blocks) * kGroup, g = std::min(kGroup, len - r0);
        const int64_t base = s0 * H + h * len * D;
        kernels::AttentionCall call;
        call.q = qh.data() + base + r0 * D;
        call.q_stride = g * D;
        call.out = oh.data() + base + r0 * D;
        call.out_stride = g * D;
        call.rows = 1;
        call.group = g;
        call.pos0 = len - 1;
        call.head_dim = D;
        call.kv_dtype = DType::F32;
        call.keys = reinterpret_cast<const uint8_t*>(kh.data() + base);
        call.values = reinterpret_cast<const uint8_t*>(vh.data() + base);
        kernels::run_attention(kernel, call);
      }
    });
  }
  pool.parallel_for(N, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const size_t sg = seg_of(r);
      const int64_t s0 = segments[sg], len = segments[sg + 1] - s0;
      for (int64_t h = 0; h < heads; ++h)
        std::memcpy(out + r * H + h * D, oh.data() + s0 * H + h * len * D + (r - s0) * D,
                    static_cast<size_t>(D) * sizeof(float));
    }
  });
}

}  // namespace fp4lm::model
