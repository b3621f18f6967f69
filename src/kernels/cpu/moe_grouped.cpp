#include "kernels/cpu/moe_grouped.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

namespace fp4lm::kernels::cpu {

GroupedMoe::GroupedMoe(MoeWeights w, const MoeProblem& p, Nvfp4Mode mode)
    : p_(p), mode_(mode), hidden_(w.hidden), inter_(w.inter), keepalive_(std::move(w.keepalive)) {
  if (w.num_experts <= 0 || static_cast<int64_t>(w.w13.size()) != w.num_experts ||
      static_cast<int64_t>(w.w2.size()) != w.num_experts)
    fail("NVFP4 MoE: {} experts declared, found {} w13 and {} w2 weights", w.num_experts,
         w.w13.size(), w.w2.size());
  for (int64_t e = 0; e < w.num_experts; ++e) {
    if (w.w13[e].n != 2 * w.inter || w.w13[e].k != w.hidden)
      fail("NVFP4 MoE expert {}: w13 is [{}, {}], expected [{}, {}]", e, w.w13[e].n, w.w13[e].k,
           2 * w.inter, w.hidden);
    if (w.w2[e].n != w.hidden || w.w2[e].k != w.inter)
      fail("NVFP4 MoE expert {}: w2 is [{}, {}], expected [{}, {}]", e, w.w2[e].n, w.w2[e].k,
           w.hidden, w.inter);
    LinearProblem lp{w.key, p.act_dtype, 2 * w.inter, w.hidden, p.options};
    w13_.emplace_back(std::move(w.w13[e]), lp, mode);
    lp.n = w.hidden;
    lp.k = w.inter;
    w2_.emplace_back(std::move(w.w2[e]), lp, mode);
  }
}

size_t GroupedMoe::weight_bytes() const {
  size_t b = 0;
  for (const auto& k : w13_) b += k.weight_bytes();
  for (const auto& k : w2_) b += k.weight_bytes();
  return b;
}

void GroupedMoe::forward(const void* x, int64_t m, const int32_t* topk_ids,
                         const float* topk_weights, int64_t top_k, void* y,
                         ThreadPool& pool) const {
  if (m <= 0) return;
  if (top_k <= 0) fail("NVFP4 MoE: top_k = {}, expected > 0", top_k);
  const int64_t experts = static_cast<int64_t>(w13_.size()), slots = m * top_k;
  const DType act = p_.act_dtype;
  const size_t esize = dtype_size(act);
  // Call-level choice: a decode call (m <= a16_max_tokens) runs every expert at W4A16.
  const Nvfp4Mode mode =
      (mode_ == Nvfp4Mode::w4a4 && m <= p_.options.a16_max_tokens) ? Nvfp4Mode::w4a16 : mode_;

  // Counting sort of the slots by expert, stable (token order within an expert).
  std::vector<int64_t> start(static_cast<size_t>(experts + 1), 0);
  for (int64_t s = 0; s < slots; ++s) {
    const int32_t e = topk_ids[s];
    if (e < 0 || e >= experts) fail("NVFP4 MoE: expert id {} out of range [0, {})", e, experts);
    ++start[e + 1];
  }
  for (int64_t e = 0; e < experts; ++e) start[e + 1] += start[e];
  std::vector<int64_t> order(static_cast<size_t>(slots));
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t s = 0; s < slots; ++s) order[fill[topk_ids[s]]++] = s;
  }

  std::vector<float> slot_out(static_cast<size_t>(slots * hidden_));
  std::vector<uint8_t> xe, h13, mid, out;
  std::vector<float> f;
  for (int64_t e = 0; e < experts; ++e) {
    const int64_t cnt = start[e + 1] - start[e];
    if (cnt == 0) continue;
    const int64_t* sl = order.data() + start[e];
    xe.resize(static_cast<size_t>(cnt * hidden_) * esize);
    for (int64_t i = 0; i < cnt; ++i)
      std::memcpy(xe.data() + i * hidden_ * esize,
                  static_cast<const uint8_t*>(x) + (sl[i] / top_k) * hidden_ * esize, hidden_ * esize);
    h13.resize(static_cast<size_t>(cnt * 2 * inter_) * esize);
    w13_[e].forward_with(mode, xe.data(), cnt, h13.data(), pool);
    // SiLU(gate) · up on the act-dtype h13, rounded to the act dtype (as ReferenceMoe does).
    f.resize(static_cast<size_t>(cnt * 2 * inter_));
    to_f32_n(h13.data(), act, f.data(), f.size());
    std::vector<float> a(static_cast<size_t>(cnt * inter_));
    for (int64_t i = 0; i < cnt; ++i) {
      const float* gate = f.data() + i * 2 * inter_;
      const float* up = gate + inter_;
      for (int64_t c = 0; c < inter_; ++c) {
        const float g = gate[c];
        a[i * inter_ + c] = g / (1.0f + std::exp(-g)) * up[c];
      }
    }
    mid.resize(static_cast<size_t>(cnt * inter_) * esize);
    from_f32_n(a.data(), act, mid.data(), a.size());
    out.resize(static_cast<size_t>(cnt * hidden_) * esize);
    w2_[e].forward_with(mode, mid.data(), cnt, out.data(), pool);
    for (int64_t i = 0; i < cnt; ++i)
      to_f32_n(out.data() + i * hidden_ * esize, act, slot_out.data() + sl[i] * hidden_, hidden_);
  }

  // Weighted sum per token, slots in order (fixed order: thread-count independent).
  std::vector<float> yf(static_cast<size_t>(hidden_));
  for (int64_t i = 0; i < m; ++i) {
    std::fill(yf.begin(), yf.end(), 0.0f);
    for (int64_t j = 0; j < top_k; ++j) {
      const float wgt = topk_weights[i * top_k + j];
      const float* o = slot_out.data() + (i * top_k + j) * hidden_;
      for (int64_t c = 0; c < hidden_; ++c) yf[c] += wgt * o[c];
    }
    from_f32_n(yf.data(), act, static_cast<uint8_t*>(y) + i * hidden_ * esize, yf.size());
  }
}

}  // namespace fp4lm::kernels::cpu
