// The scalar `reference` backend: every scheme, always available, obviously correct. It is the
// oracle every fast kernel is tested against, and the fallback on CPUs without AVX2.
// Weights are decoded row by row on the fly (no dequantized copy), products summed in double.
#include <cmath>
#include <vector>

#include "core/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/reference/math.h"
#include "quant/nvfp4.h"

namespace fp4lm::kernels {

namespace {

class ReferenceLinear final : public LinearKernel {
 public:
  ReferenceLinear(LinearWeights w, const LinearProblem& p) : w_(std::move(w)), p_(p) {
    if (w_.key.weight == WeightKey::int4) check_int4_weights(w_);
    if (w_.key.weight == WeightKey::int8) check_int8_weights(w_);
  }

  void forward(const void* x, int64_t m, void* y, ThreadPool& pool) const override {
    const int64_t n = w_.n, k = w_.k;
    std::vector<float> xf(static_cast<size_t>(m * k));
    to_f32_n(x, p_.act_dtype, xf.data(), xf.size());
    std::vector<float> xin = reference_activation_input(w_, xf.data(), m);
    std::vector<float> yf(static_cast<size_t>(m * n));
    pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
      std::vector<float> row(static_cast<size_t>(k));
      for (int64_t r = begin; r < end; ++r) {
        reference_weight_row(w_, r, row.data());
        for (int64_t i = 0; i < m; ++i) {
          const float* xi = xin.data() + i * k;
          double acc = 0;
          for (int64_t j = 0; j < k; ++j) acc += static_cast<double>(xi[j]) * row[j];
          if (!w_.bias.empty()) acc += w_.bias[r];
          yf[i * n + r] = static_cast<float>(acc);
        }
      }
    });
    from_f32_n(yf.data(), p_.act_dtype, y, yf.size());
  }

  size_t weight_bytes() const override { return linear_weight_bytes(w_); }

 private:
  LinearWeights w_;
  LinearProblem p_;
};

// A naive per-token, per-expert loop; the intermediate activation is rounded to the activation
// dtype before the down projection, as a 16-bit engine stores it.
class ReferenceMoe final : public MoeKernel {
 public:
  ReferenceMoe(MoeWeights w, const MoeProblem& p) : p_(p), hidden_(w.hidden), inter_(w.inter) {
    for (int64_t e = 0; e < w.num_experts; ++e) {
      LinearProblem lp{w.key, p.act_dtype, 2 * w.inter, w.hidden, p.options};
      w13_.emplace_back(std::move(w.w13[e]), lp);
      lp.n = w.hidden;
      lp.k = w.inter;
      w2_.emplace_back(std::move(w.w2[e]), lp);
    }
  }

  void forward(const void* x, int64_t m, const int32_t* topk_ids, const float* topk_weights,
               int64_t top_k, void* y, ThreadPool& pool) const override {
    const size_t esize = dtype_size(p_.act_dtype);
    std::vector<float> yf(static_cast<size_t>(m * hidden_), 0.0f);
    std::vector<uint8_t> h13(static_cast<size_t>(2 * inter_) * esize), act(inter_ * esize),
        out(hidden_ * esize);
    std::vector<float> h13f(2 * inter_), actf(inter_), outf(hidden_);
    for (int64_t i = 0; i < m; ++i) {
      const void* xi = static_cast<const uint8_t*>(x) + i * hidden_ * esize;
      for (int64_t j = 0; j < top_k; ++j) {
        int32_t e = topk_ids[i * top_k + j];
        if (e < 0 || e >= static_cast<int32_t>(w13_.size()))
          fail("MoE: expert id {} out of range [0, {})", e, w13_.size());
        w13_[e].forward(xi, 1, h13.data(), pool);
        to_f32_n(h13.data(), p_.act_dtype, h13f.data(), h13f.size());
        apply_expert_activation(p_.activation, h13f.data(), inter_, actf.data());
        from_f32_n(actf.data(), p_.act_dtype, act.data(), actf.size());
        w2_[e].forward(act.data(), 1, out.data(), pool);
        to_f32_n(out.data(), p_.act_dtype, outf.data(), outf.size());
        float wgt = topk_weights[i * top_k + j];
        for (int64_t c = 0; c < hidden_; ++c) yf[i * hidden_ + c] += wgt * outf[c];
      }
    }
    from_f32_n(yf.data(), p_.act_dtype, y, yf.size());
  }

  size_t weight_bytes() const override {
    size_t b = 0;
    for (const auto& k : w13_) b += k.weight_bytes();
    for (const auto& k : w2_) b += k.weight_bytes();
    return b;
  }

 private:
  MoeProblem p_;
  int64_t hidden_, inter_;
  std::vector<ReferenceLinear> w13_, w2_;
};

const std::vector<QuantKey> kAllSchemes = {kUnquantized, kNvfp4W4A4, kNvfp4W4A16, kFp8, kFp8W8A16, kFp8Block,
                                           kFp8BlockW8A16, kMxfp4W4A16, kInt4W4A16, kNvfp4W4A8, kFp8PerToken, kMxfp8, kMxfp4W4A8, kMxfp4W4A8Dynamic,
                                           kInt8W8A16, kInt8W8A8};
const std::vector<DType> kAllActDtypes = {DType::F32, DType::BF16, DType::F16};

}  // namespace

const Backend& reference_linear_backend() {
  static const Backend b = [] {
    Backend b;
    b.name = "reference";
    b.kind = LayerKind::linear;
    b.schemes = kAllSchemes;
    b.act_dtypes = kAllActDtypes;
    b.make_linear = [](LinearWeights w, const LinearProblem& p) -> std::unique_ptr<LinearKernel> {
      return std::make_unique<ReferenceLinear>(std::move(w), p);
    };
    return b;
  }();
  return b;
}

const Backend& reference_moe_backend() {
  static const Backend b = [] {
    Backend b;
    b.name = "reference";
    b.kind = LayerKind::moe;
    b.schemes = kAllSchemes;
    b.act_dtypes = kAllActDtypes;
    b.make_moe = [](MoeWeights w, const MoeProblem& p) -> std::unique_ptr<MoeKernel> {
      return std::make_unique<ReferenceMoe>(std::move(w), p);
    };
    return b;
  }();
  return b;
}

}  // namespace fp4lm::kernels
