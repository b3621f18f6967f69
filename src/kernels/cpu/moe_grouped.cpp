#include "kernels/cpu/moe_grouped.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace fp4lm::kernels::cpu {

namespace {

// One unit of work: rows [r0, r1) of expert e's projection.
struct Item {
  int64_t e, r0, r1;
  double cost;  // tokens × rows
};

// Runs fn(item) for every item, spread over the pool by cost (contiguous runs of items, each
// thread about total/T of the cost). The split only decides who computes what: every (row,
// token) result is the same on any thread.
template <typename Fn>
void run_items(const std::vector<Item>& items, ThreadPool& pool, Fn&& fn) {
  double total = 0;
  for (const Item& it : items) total += it.cost;
  const int threads = static_cast<int>(std::min<int64_t>(pool.size(), static_cast<int64_t>(items.size())));
  pool.parallel_for(threads, [&](int64_t t0, int64_t t1, int) {
    double before = 0;
    for (const Item& it : items) {
      const double mid = (before + it.cost / 2) / total * threads;  // the item's cost midpoint
      before += it.cost;
      const int64_t owner = std::min<int64_t>(threads - 1, static_cast<int64_t>(mid));
      if (owner >= t0 && owner < t1) fn(it);
    }
  });
}

}  // namespace

GroupedMoe::GroupedMoe(MoeWeights w, const MoeProblem& p, const MakeLinear& make)
    : p_(p), hidden_(w.hidden), inter_(w.inter), keepalive_(std::move(w.keepalive)) {
  if (w.num_experts <= 0 || static_cast<int64_t>(w.w13.size()) != w.num_experts ||
      static_cast<int64_t>(w.w2.size()) != w.num_experts)
    fail("MoE: {} experts declared, found {} w13 and {} w2 weights", w.num_experts, w.w13.size(),
         w.w2.size());
  for (int64_t e = 0; e < w.num_experts; ++e) {
    if (w.w13[e].n != 2 * w.inter || w.w13[e].k != w.hidden)
      fail("MoE expert {}: w13 is [{}, {}], expected [{}, {}]", e, w.w13[e].n, w.w13[e].k,
           2 * w.inter, w.hidden);
    if (w.w2[e].n != w.hidden || w.w2[e].k != w.inter)
      fail("MoE expert {}: w2 is [{}, {}], expected [{}, {}]", e, w.w2[e].n, w.w2[e].k, w.hidden,
           w.inter);
    LinearProblem lp{w.key, p.act_dtype, 2 * w.inter, w.hidden, p.options};
    w13_.push_back(make(std::move(w.w13[e]), lp));
    lp.n = w.hidden;
    lp.k = w.inter;
    w2_.push_back(make(std::move(w.w2[e]), lp));
  }
}

size_t GroupedMoe::weight_bytes() const {
  size_t b = 0;
  for (const auto& k : w13_) b += k->weight_bytes();
  for (const auto& k : w2_) b += k->weight_bytes();
  return b;
}

void GroupedMoe::forward(const void* x, int64_t m, const int32_t* topk_ids,
                         const float* topk_weights, int64_t top_k, void* y,
                         ThreadPool& pool) const {
  if (m <= 0) return;
  if (top_k <= 0) fail("MoE: top_k = {}, expected > 0", top_k);
  const int64_t experts = static_cast<int64_t>(w13_.size()), slots = m * top_k;
  const DType act = p_.act_dtype;
  const size_t es = dtype_size(act);
  // Call-level choice: a decode call (m <= a16_max_tokens, or as the thread's A16Scope forces
  // it) runs every expert at W4A16.
  const bool a16 = w13_[0]->a16_for(m);

  // Counting sort of the slots by expert, stable (token order within an expert).
  std::vector<int64_t> start(static_cast<size_t>(experts + 1), 0);
  for (int64_t s = 0; s < slots; ++s) {
    const int32_t e = topk_ids[s];
    if (e < 0 || e >= experts) fail("MoE: expert id {} out of range [0, {})", e, experts);
    ++start[e + 1];
  }
  for (int64_t e = 0; e < experts; ++e) start[e + 1] += start[e];
  std::vector<int64_t> order(static_cast<size_t>(slots));
  {
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t s = 0; s < slots; ++s) order[fill[topk_ids[s]]++] = s;
  }
  std::vector<int64_t> active;
  for (int64_t e = 0; e < experts; ++e)
    if (start[e + 1] > start[e]) active.push_back(e);

  // Buffers in sorted-slot order: expert e's rows are [start[e], start[e+1]).
  std::vector<uint8_t> xe(static_cast<size_t>(slots * hidden_) * es);
  for (int64_t i = 0; i < slots; ++i)
    std::memcpy(xe.data() + i * hidden_ * es,
                static_cast<const uint8_t*>(x) + (order[i] / top_k) * hidden_ * es, hidden_ * es);
  std::vector<uint8_t> h13(static_cast<size_t>(slots * 2 * inter_) * es), mid(static_cast<size_t>(slots * inter_) * es),
      out(static_cast<size_t>(slots * hidden_) * es);
  std::vector<std::unique_ptr<PreparedInput>> in(static_cast<size_t>(experts));

  // One projection for every active expert: inputs prepared per expert, then all experts' row
  // blocks in one parallel loop.
  auto project = [&](const std::vector<std::unique_ptr<RowSplitLinear>>& lin, const uint8_t* src,
                     int64_t k, uint8_t* dst, int64_t n) {
    pool.parallel_for(static_cast<int64_t>(active.size()), [&](int64_t a0, int64_t a1, int) {
      for (int64_t a = a0; a < a1; ++a) {
        const int64_t e = active[a];
        in[e] = lin[e]->prepare(src + start[e] * k * es, start[e + 1] - start[e], a16, pool);
      }
    });
    std::vector<Item> items;
    for (int64_t e : active) {
      const int64_t cnt = start[e + 1] - start[e], rb = lin[e]->row_block(cnt);
      for (int64_t r0 = 0; r0 < n; r0 += rb)
        items.push_back({e, r0, std::min(n, r0 + rb), static_cast<double>(cnt) * static_cast<double>(std::min(n, r0 + rb) - r0)});
    }
    run_items(items, pool, [&](const Item& it) {
      lin[it.e]->run_rows(*in[it.e], it.r0, it.r1, dst + start[it.e] * n * es);
    });
  };

  project(w13_, xe.data(), hidden_, h13.data(), 2 * inter_);
  // The expert activation (default SiLU(gate) · up) on the act-dtype h13, rounded to the act dtype (as ReferenceMoe does).
  pool.parallel_for(slots, [&](int64_t s0, int64_t s1, int) {
    std::vector<float> f(static_cast<size_t>(2 * inter_)), a(static_cast<size_t>(inter_));
    for (int64_t i = s0; i < s1; ++i) {
      to_f32_n(h13.data() + i * 2 * inter_ * es, act, f.data(), f.size());
      apply_expert_activation(p_.activation, f.data(), inter_, a.data());
      from_f32_n(a.data(), act, mid.data() + i * inter_ * es, a.size());
    }
  });
  project(w2_, mid.data(), inter_, out.data(), hidden_);

  // Weighted sum per token, slots in order (fixed order: thread-count independent).
  std::vector<int64_t> pos(static_cast<size_t>(slots));  // slot -> sorted position
  for (int64_t i = 0; i < slots; ++i) pos[order[i]] = i;
  pool.parallel_for(m, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> yf(static_cast<size_t>(hidden_)), o(static_cast<size_t>(hidden_));
    for (int64_t i = t0; i < t1; ++i) {
      std::fill(yf.begin(), yf.end(), 0.0f);
      for (int64_t j = 0; j < top_k; ++j) {
        const float wgt = topk_weights[i * top_k + j];
        to_f32_n(out.data() + pos[i * top_k + j] * hidden_ * es, act, o.data(), o.size());
        for (int64_t c = 0; c < hidden_; ++c) yf[c] += wgt * o[c];
      }
      from_f32_n(yf.data(), act, static_cast<uint8_t*>(y) + i * hidden_ * es, yf.size());
    }
  });
}

}  // namespace fp4lm::kernels::cpu
