#include "model/layers/low_rank_branch.h"

#include <cmath>

#include "core/error.h"

namespace fp4lm::model {

namespace {

float round_act(DType t, float v) {
  switch (t) {
    case DType::BF16: return bf16_to_f32(f32_to_bf16(v));
    case DType::F16: return f16_to_f32(f32_to_f16(v));
    default: return v;
  }
}

// `name` as float32, checked finite; the shape must be {d0, d1}.
std::vector<float> read_matrix(const ParamReader& p, const std::string& name, int64_t d0, int64_t d1) {
  const TensorView& t = p.require(name, {DType::F32, DType::BF16, DType::F16}, {d0, d1});
  std::vector<float> v(static_cast<size_t>(d0 * d1));
  to_f32_n(t.data, t.dtype, v.data(), v.size());
  for (size_t i = 0; i < v.size(); ++i)
    if (!std::isfinite(v[i])) fail("{}: element [{}, {}] is {}", p.where(name), i / d1, i % d1, v[i]);
  return v;
}

}  // namespace

LowRankBranch read_low_rank_branch(const ParamReader& p, const LayerSpec& spec, bool required,
                                   std::optional<int> rank) {
  LowRankBranch out;
  out.k = spec.in_features;
  out.n = spec.out_features;
  const int64_t k = spec.in_features;
  std::string with, without;
  int64_t row0 = 0;
  for (size_t i = 0; i < spec.shards.size(); ++i) {
    const std::string& m = spec.shards[i];
    const int64_t rows = i < spec.shard_rows.size() ? spec.shard_rows[i] : spec.out_features;
    const int64_t at = row0;
    row0 += rows;
    std::string a = m + ".weight_quantizer._svdquant_lora_a", b = m + ".weight_quantizer._svdquant_lora_b";
    if (!p.checkpoint().find(a) && !p.checkpoint().find(b)) {
      a = m + ".svdquant_lora_a";
      b = m + ".svdquant_lora_b";
    }
    const TensorView* ta = p.checkpoint().find(a);
    const TensorView* tb = p.checkpoint().find(b);
    if (!ta && !tb) {
      if (required)
        fail("{}: missing tensor '{}.weight_quantizer._svdquant_lora_a' (NVFP4_SVD: SVDQuant's low-rank branch of layer "
             "{}, [rank, {}], with '_svdquant_lora_b' [{}, rank])",
             p.checkpoint().dir(), m, spec.name, k, rows);
      if (without.empty()) without = m;
      continue;
    }
    if (!ta || !tb)
      fail("{}: missing tensor '{}' (SVDQuant's low-rank branch needs both factors; '{}' is present)",
           p.checkpoint().dir(), ta ? b : a, ta ? a : b);
    if (ta->shape.size() != 2 || ta->shape[1] != k || ta->shape[0] <= 0)
      fail("{}: SVDQuant lora_a of layer {} must be [rank, {}], found {}", p.where(a), spec.name, k,
           shape_str(ta->shape));
    const int64_t r = ta->shape[0];
    if (rank && r != *rank)
      fail("{}: rank {} differs from the config's lora_rank {}", p.where(a), r, *rank);
    LowRankBranch::Part part;
    part.module = m;
    part.row0 = at;
    part.rows = rows;
    part.rank = r;
    part.a = read_matrix(p, a, r, k);
    part.b = read_matrix(p, b, rows, r);
    out.parts.push_back(std::move(part));
    if (with.empty()) with = m;
  }
  if (!with.empty() && !without.empty())
    fail("{}: fused layer {}: {} stores SVDQuant's low-rank branch and {} does not", p.checkpoint().dir(), spec.name,
         with, without);
  return out;
}

void LowRankBranch::add_to(const float* x, int64_t m, float* y, DType act) const {
  std::vector<float> t;
  for (const Part& p : parts) {
    t.assign(static_cast<size_t>(m * p.rank), 0.0f);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t q = 0; q < p.rank; ++q) {
        const float* xr = x + i * k;
        const float* ar = p.a.data() + q * k;
        float s = 0.0f;
        for (int64_t j = 0; j < k; ++j) s += xr[j] * ar[j];
        t[static_cast<size_t>(i * p.rank + q)] = round_act(act, s);
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t r = 0; r < p.rows; ++r) {
        const float* br = p.b.data() + r * p.rank;
        const float* tr = t.data() + i * p.rank;
        float s = 0.0f;
        for (int64_t q = 0; q < p.rank; ++q) s += tr[q] * br[q];
        float& out = y[i * n + p.row0 + r];
        out = round_act(act, out + round_act(act, s));
      }
  }
}

}  // namespace fp4lm::model
