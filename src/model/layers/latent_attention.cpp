#include "model/layers/latent_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/reference/math.h"
#include "model/layers/activation.h"
#include "model/state/kv_cache_scale.h"
#include "model/load/model_loader.h"
#include "model/layers/row_ops.h"
#include "model/state/sequence_state.h"
#include "model/state/state_layout.h"

namespace fp4lm::model {

MlaForm mla_form_from_env() {
  const char* v = std::getenv("FP4LM_MLA_FORM");
  if (!v || !*v || std::string(v) == "absorbed") return MlaForm::absorbed;
  if (std::string(v) == "expanded") return MlaForm::expanded;
  fail("FP4LM_MLA_FORM='{}': expected 'absorbed' or 'expanded'", v);
}

LatentAttention::LatentAttention(const LayerBuild& b, int64_t layer, MlaForm form)
    : layer_(layer), form_(form), rope_(b.rope) {
  ModelLoader& loader = b.loader;
  const ModelConfig& c = loader.config();
  const LatentAttentionConfig& a = c.mla;
  heads_ = c.num_heads;
  q_lora_ = a.q_lora_rank;
  kv_lora_ = a.kv_lora_rank;
  dn_ = a.qk_nope_head_dim;
  dr_ = a.qk_rope_head_dim;
  dv_ = a.v_head_dim;
  interleave_ = a.rope_interleave;
  act_ = loader.dtype();
  if (rope_.head_dim() != dr_)
    fail("layer {}: RoPE covers {} dims but qk_rope_head_dim is {}", layer, rope_.head_dim(), dr_);
  scale_ = 1.0 / std::sqrt(static_cast<double>(dn_ + dr_));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == "yarn" && rs.mscale_all_dim != 0) {
    const double m = yarn_mscale(rs.factor, rs.mscale_all_dim);
    scale_ *= m * m;
  }
  const std::string p = fmt::format("model.layers.{}.self_attn", layer);
  // The latent norms' eps is transformers' RMSNorm default 1e-6 whatever rms_norm_eps says (it
  // differs in GLM-4.7-Flash and GLM-5: 1e-5).
  auto latent_norm = [&](const std::string& name, int64_t dim) {
    return RmsNorm(loader.tensor_f32(name, {dim}), 1e-6);
  };
  if (q_lora_ > 0) {
    q_a_ = loader.load_linear(p + ".q_a_proj");
    q_a_norm_ = latent_norm(p + ".q_a_layernorm.weight", q_lora_);
    q_b_ = loader.load_linear(p + ".q_b_proj");
  } else {
    q_ = loader.load_linear(p + ".q_proj");
  }
  kv_a_ = loader.load_linear(p + ".kv_a_proj_with_mqa");
  kv_a_norm_ = latent_norm(p + ".kv_a_layernorm.weight", kv_lora_);
  o_ = loader.load_linear(p + ".o_proj");
  // kv_b_proj, dequantized: both forms multiply by its rows directly.
  const LayerSpec& kvb = loader.layer(p + ".kv_b_proj");
  const kernels::LinearWeights w = loader.linear_weights(kvb, loader.describe(kvb).scheme);
  kv_b_.resize(static_cast<size_t>(w.n * w.k));
  for (int64_t r = 0; r < w.n; ++r) kernels::reference_weight_row(w, r, kv_b_.data() + r * w.k);
  // An AWQ pre_quant_scale scales kv_b_proj's input per channel: exact folded into the float32 columns.
  if (const std::vector<float> s = loader.pre_quant_scale(kvb); !s.empty())
    for (int64_t r = 0; r < w.n; ++r)
      for (int64_t j = 0; j < w.k; ++j) kv_b_[static_cast<size_t>(r * w.k + j)] *= s[static_cast<size_t>(j)];

  KvSlotShape shape{.kv_heads = 1, .head_dim = kv_lora_ + dr_, .window = 0, .key_only = true};
  if (b.state.kv_quant() != KvQuant::none)
    fail("layer {}: the checkpoint declares a {} KV cache, but multi-head latent attention caches its latent (one "
         "key-only slot), which fp4lm stores only in a float dtype or FP8; pass --kv-cache-dtype (bfloat16, float16, "
         "float32 or fp8) to run the latent cache in that format",
         layer, kv_quant_name(b.state.kv_quant()));
  if (b.kv_dtype == DType::F8_E4M3) {
    int64_t missing = 0;
    // One scale for the whole latent, as vLLM's MLA uses it.
    shape.k_scale = read_kv_cache_scale(
        loader.checkpoint(), {p + ".k_scale", p + ".k_proj.k_scale", p + ".kv_a_proj_with_mqa.k_scale"}, missing);
    b.state.note_missing_kv_scales(missing);
  }
  kv_slot_ = b.state.add_kv(layer, shape);
  if (c.dsa.enabled()) {
    if (q_lora_ <= 0)
      fail("layer {}: {}'s sparse indexer reads the query latent, but q_lora_rank is null", layer, c.architecture);
    selection_ = dsa_selection(loader);
    if (!c.dsa.shares(layer)) indexer_ = std::make_unique<DsaIndexer>(b, layer);
  }
  loader.log_once(fmt::format(
      "Multi-head latent attention: the KV cache holds the latent (kv_lora_rank {} + qk_rope_head_dim {} = {} "
      "values per position per layer); {} form ({})",
      kv_lora_, dr_, kv_lora_ + dr_, form_ == MlaForm::absorbed ? "absorbed" : "expanded",
      form_ == MlaForm::absorbed ? "kv_b_proj folded into the query and output sides: one read of the latent cache"
                                 : "K/V rebuilt from the latents with kv_b_proj, FP4LM_MLA_FORM=expanded"));
}

size_t LatentAttention::weight_bytes() const {
  size_t b = kv_a_->weight_bytes() + o_->weight_bytes();
  if (q_) b += q_->weight_bytes();
  else b += q_a_->weight_bytes() + q_b_->weight_bytes();
  if (indexer_) b += indexer_->weight_bytes();
  return b;
}

size_t LatentAttention::own_param_bytes() const {
  return (kv_b_.size() + static_cast<size_t>(q_a_norm_.dim() + kv_a_norm_.dim())) * sizeof(float) +
         (indexer_ ? indexer_->own_param_bytes() : 0);
}

void LatentAttention::forward(const float* x, std::span<const SequenceSpan> spans, float* y) const {
  int64_t m = 0;
  for (const SequenceSpan& s : spans) {
    if (s.row0 != m) fail("attention: batch spans must cover the rows in order");
    if (s.pos0 + s.n > s.state->kv().capacity())
      fail("sequence of {} tokens exceeds the KV cache capacity ({} positions, --max-model-len)", s.pos0 + s.n,
           s.state->kv().capacity());
    m += s.n;
  }
  const int64_t qhd = dn_ + dr_, qd = heads_ * qhd, lat = kv_lora_ + dr_, vd = heads_ * dv_;
  // Queries.
  std::vector<float> q(static_cast<size_t>(m * qd));
  if (q_) {
    q_->forward(x, m, q.data());
  } else {
    std::vector<float> qa(static_cast<size_t>(m * q_lora_));
    q_a_->forward(x, m, qa.data());
    q_a_norm_.forward(qa.data(), m, qa.data(), act_);
    q_b_->forward(qa.data(), m, q.data());
    if (indexer_) indexer_->select(x, qa.data(), spans, *selection_);
  }
  if (selection_ && selection_->rows() != m)
    fail("layer {}: a shared sparse-attention layer found no selection of this step's {} rows (its full layer's "
         "holds {})",
         layer_, m, selection_->rows());
  // Latents: [c | k_rope], c normed.
  std::vector<float> latent(static_cast<size_t>(m * lat)), c(static_cast<size_t>(m * kv_lora_));
  kv_a_->forward(x, m, latent.data());
  for (int64_t i = 0; i < m; ++i) std::copy_n(latent.data() + i * lat, kv_lora_, c.data() + i * kv_lora_);
  kv_a_norm_.forward(c.data(), m, c.data(), act_);
  for (int64_t i = 0; i < m; ++i) std::copy_n(c.data() + i * kv_lora_, kv_lora_, latent.data() + i * lat);
  // RoPE on q_rope (every head) and the shared k_rope, at each row's position; the latent is stored.
  std::vector<float> cos(static_cast<size_t>(dr_ / 2)), sin(cos.size()), tmp(static_cast<size_t>(dr_));
  for (const SequenceSpan& s : spans)
    for (int64_t j = 0; j < s.n; ++j) {
      const int64_t i = s.row0 + j;
      float* qi = q.data() + i * qd;
      float* kr = latent.data() + i * lat + kv_lora_;
      if (interleave_) {
        for (int64_t h = 0; h < heads_; ++h) deinterleave_pairs(qi + h * qhd + dn_, dr_, tmp.data());
        deinterleave_pairs(kr, dr_, tmp.data());
      }
      rope_.cos_sin(s.pos0 + j, cos.data(), sin.data(), rope_.long_factors(s.end()));
      rope_.rotate(qi + dn_, heads_, cos.data(), sin.data(), qhd);
      rope_.rotate(kr, 1, cos.data(), sin.data(), dr_);
      round_to_dtype(qi, static_cast<size_t>(qd), act_);
      round_to_dtype(kr, static_cast<size_t>(dr_), act_);
      s.state->kv().store(kv_slot_, s.pos0 + j, latent.data() + i * lat, nullptr);
    }
  // Attention, per sequence: its latent history (as stored, so FP8 / bf16 rounding included).
  std::vector<float> attn(static_cast<size_t>(m * vd));
  const float scale = static_cast<float>(scale_);
  for (const SequenceSpan& s : spans) {
    const KvCache& cache = s.state->kv();
    const int64_t ctx = s.pos0 + s.n;
    std::vector<float> hist(static_cast<size_t>(ctx * lat));
    cache.read_f32(kv_slot_, 0, 0, 0, ctx, hist.data());
    std::vector<float> kvb;  // expanded: [ctx, heads × (dn + dv)] = kv_b_proj(c), rounded as HF's Linear output
    if (form_ == MlaForm::expanded) {
      const int64_t w = heads_ * (dn_ + dv_);
      kvb.resize(static_cast<size_t>(ctx * w));
      ThreadPool::global().parallel_for(ctx, [&](int64_t u0, int64_t u1, int) {
        for (int64_t u = u0; u < u1; ++u)
          for (int64_t r = 0; r < w; ++r)
            kvb[u * w + r] = dot_lanes(kv_b_.data() + r * kv_lora_, hist.data() + u * lat, kv_lora_);
      });
      round_to_dtype(kvb.data(), kvb.size(), act_);
    }
    ThreadPool::global().parallel_for(s.n * heads_, [&](int64_t t0, int64_t t1, int) {
      std::vector<float> qlat(static_cast<size_t>(kv_lora_)), olat(qlat.size()), score(static_cast<size_t>(ctx));
      std::vector<float> acc(static_cast<size_t>(dv_));
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t j = t / heads_, h = t % heads_, i = s.row0 + j, pos = s.pos0 + j;
        // The positions attended to, ascending: all of 0..pos, or the row's selection (sparse
        // attention past the budget; its first pos + 1 entries are 0..pos below it).
        const int32_t* sel = selection_ && pos + 1 > selection_->topk() ? selection_->row(i) : nullptr;
        const int64_t n_u = sel ? selection_->topk() : pos + 1;
        const float* qn = q.data() + i * qd + h * qhd;  // [q_nope | q_rope]
        const float* wk = kv_b_.data() + h * (dn_ + dv_) * kv_lora_;  // W_kb[h] [dn, kv_lora]
        const float* wv = wk + dn_ * kv_lora_;                          // W_vb[h] [dv, kv_lora]
        float* out = attn.data() + i * vd + h * dv_;
        float mx = -INFINITY;
        if (form_ == MlaForm::absorbed) {
          std::fill(qlat.begin(), qlat.end(), 0.0f);
          for (int64_t d = 0; d < dn_; ++d)
            for (int64_t r = 0; r < kv_lora_; ++r) qlat[r] += qn[d] * wk[d * kv_lora_ + r];
          for (int64_t a = 0; a < n_u; ++a) {
            const float* lu = hist.data() + (sel ? sel[a] : a) * lat;
            score[a] = (dot_lanes(qlat.data(), lu, kv_lora_) + dot_lanes(qn + dn_, lu + kv_lora_, dr_)) * scale;
            mx = std::max(mx, score[a]);
          }
        } else {
          const int64_t w = heads_ * (dn_ + dv_);
          for (int64_t a = 0; a < n_u; ++a) {
            const int64_t u = sel ? sel[a] : a;
            const float* ku = kvb.data() + u * w + h * (dn_ + dv_);
            score[a] = (dot_lanes(qn, ku, dn_) + dot_lanes(qn + dn_, hist.data() + u * lat + kv_lora_, dr_)) * scale;
            mx = std::max(mx, score[a]);
          }
        }
        float sum = 0;
        for (int64_t a = 0; a < n_u; ++a) sum += score[a] = std::exp(score[a] - mx);
        const float inv = 1.0f / sum;
        if (form_ == MlaForm::absorbed) {
          std::fill(olat.begin(), olat.end(), 0.0f);
          for (int64_t a = 0; a < n_u; ++a) {
            const float pu = score[a] * inv;
            const float* lu = hist.data() + (sel ? sel[a] : a) * lat;
            for (int64_t r = 0; r < kv_lora_; ++r) olat[r] += pu * lu[r];
          }
          for (int64_t e = 0; e < dv_; ++e) out[e] = dot_lanes(wv + e * kv_lora_, olat.data(), kv_lora_);
        } else {
          const int64_t w = heads_ * (dn_ + dv_);
          std::fill(acc.begin(), acc.end(), 0.0f);
          for (int64_t a = 0; a < n_u; ++a) {
            const float pu = score[a] * inv;
            const float* vu = kvb.data() + (sel ? sel[a] : a) * w + h * (dn_ + dv_) + dn_;
            for (int64_t e = 0; e < dv_; ++e) acc[e] += pu * vu[e];
          }
          std::copy(acc.begin(), acc.end(), out);
        }
      }
    });
  }
  round_to_dtype(attn.data(), attn.size(), act_);
  o_->forward(attn.data(), m, y);
}

}  // namespace fp4lm::model
