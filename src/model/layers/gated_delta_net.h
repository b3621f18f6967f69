#pragma once
// The gated delta-net (GDN) linear-attention mixer of the Qwen3.5 / Qwen3-Next hybrids
// (`linear_attn`). Per token, with h the normed hidden state:
//   [q k v] = causal depthwise conv1d (kernel K, no bias) over in_proj_qkv(h), then SiLU;
//   q, k L2-normalized per key head (eps 1e-6 under the root), q scaled by DK^-1/2;
//   g = -exp(A_log)·softplus(a + dt_bias), β = sigmoid(b) with [b a] = in_proj_ba(h);
//   per value head j (reading key head j / (NV/NK)), S [DK, DV] float32:
//     S ← e^g·S;  S ← S + k ⊗ β(v − Sᵀk);  o = Sᵀq
//   (decode rows recurrent, longer spans in the chunked form: model/layers/gated_delta_rule.h; a
//   rewindable span, a speculative verify chunk, recurrent and logged for replay());
//   y = out_proj(rms(o)·w·silu(z)) with z = in_proj_z(h), the norm per value head (sigmoid(z)
//   with GatedDeltaNetConfig::sigmoid_gate).
// Qwen3-Next stores in_proj_qkv + in_proj_z as one in_proj_qkvz and in_proj_b + in_proj_a as one
// in_proj_ba, both interleaved per key head (arch/qwen3_next.cpp); their outputs are rearranged
// into the separate layout before the conv (a permutation of the projected rows, no weight copy).
// Its per-sequence state, declared while it loads (one recurrent slot of the StateLayout): the
// last K-1 pre-conv rows [K-1, conv_dim] followed by S for every value head [NV, DK, DV],
// float32; and a row alignment of gdn::kChunk (its chunked form's blocks start at multiples of it).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "kernels/delta_rule.h"
#include "model/layer_build.h"
#include "model/layers/linear.h"
#include "model/layers/recurrent_mixer.h"
#include "model/model_config.h"
#include "model/state/sequence_state.h"

namespace fp4lm::model {

class ModelLoader;

class GatedDeltaNet final : public RecurrentMixer {
 public:
  // Loads model.layers.<layer>.linear_attn.* and declares its recurrent slot in b.state (its
  // log row: the conv input and [b a], conv_dim + 2·NV floats).
  GatedDeltaNet(const LayerBuild& b, int64_t layer);

  // x [m, hidden] (the normed rows of every span, in order) -> y [m, hidden]; advances each
  // span's state by its rows (writing through SequenceState::recurrent_out).
  void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const override;

  size_t weight_bytes() const override;
  size_t own_param_bytes() const override;

 private:
  void rerun(SequenceState& state, float* window, const float* log, int64_t rows) const override;
  int64_t nk_, nv_, dk_, dv_;
  double eps_;
  bool sigmoid_gate_ = false;  // the gated norm's gate: sigmoid(z) instead of silu(z)
  DType act_;
  // Project the normed rows x [m, hidden] into qkv [m, conv_dim] (q, k, v in head order),
  // z [m, NV·DV] and ba [m, 2·NV] (b then a, by value head), whichever layout is on disk.
  void project(const float* x, int64_t m, float* qkv, float* z, float* ba) const;
  // One row from its conv input xt and [b a] bt: the conv over window (the previous K-1 pre-conv
  // rows, then shifted to include xt), SiLU, q/k normalized into mt [conv_dim]; g and β per value
  // head. Forward and replay share it, so a replayed row is the same arithmetic.
  void prepare_row(float* window, const float* xt, const float* bt, float* mt, float* g, float* beta) const;
  // Key head kh's delta-rule rows over n rows of mixed [n, conv_dim], g and β [n, NV], o [n, NV·DV].
  kernels::DeltaRuleRows rule_rows(const float* mixed, const float* g, const float* beta, float* o, int64_t n,
                                   int64_t pos0, int64_t kh) const;

  std::unique_ptr<Linear> in_qkv_, in_z_, in_ba_, out_;
  std::unique_ptr<Linear> in_qkvz_;  // Qwen3-Next's fused layout (then in_qkv_ and in_z_ are null)
  std::vector<float> conv_w_;   // [conv_dim, K]
  std::vector<float> a_log_, dt_bias_, norm_w_;
};

}  // namespace fp4lm::model
