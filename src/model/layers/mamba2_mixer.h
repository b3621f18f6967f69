#pragma once
// The Mamba-2 mixer of the Nemotron-H hybrids (`backbone.layers.<i>.mixer` of an 'M' layer), as
// transformers' NemotronHMamba2Mixer computes it. Per token, with h the normed hidden state,
// H heads of P dims (I = H·P), G groups of the state size N, K the conv kernel:
//   [z | xBC | dt] = in_proj(h)                    z [I], xBC [I + 2·G·N], dt [H]
//   xBC = silu(conv1d(xBC) + conv_bias)            causal depthwise, over the previous K-1 rows
//   x, B, C = xBC split [I], [G·N], [G·N]          head j reads group j / (H/G)'s B and C
//   dt_j = clamp(softplus(dt_j + dt_bias_j), time_step_limit);  A_j = -exp(A_log_j)
//   per head j, S_j [P, N]:  S_j ← e^{dt_j·A_j}·S_j + dt_j·x_j ⊗ B;  y_j = S_j·C + D_j·x_j
//   y = out_proj(rms_G(y·silu(z))·w)                the RMSNorm per group of I/G channels
// The scan is the recurrent form for prefill and decode alike (kernels/ssm_scan.h): its results
// depend on nothing but the sequence's own rows, so they do not depend on the batch or on how a
// prompt is cut into steps (no row alignment needed). A rewindable span (a speculative verify
// chunk) runs it exactly as decode would, row by row, and logs its rows for replay().
// Its per-sequence state, declared while it loads (one recurrent slot of the StateLayout, a fixed
// size whatever the sequence length): the last K-1 pre-conv rows [K-1, I + 2·G·N] followed by
// S for every head [H, P, N], float32. mamba_ssm_cache_dtype bfloat16 / float16 rounds S to that
// type after each call, as a cache of that dtype would store it (the memory stays float32).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "kernels/ssm_scan.h"
#include "model/layer_build.h"
#include "model/layers/linear.h"
#include "model/layers/recurrent_mixer.h"
#include "model/state/sequence_state.h"

namespace fp4lm::model {

class Mamba2Mixer final : public RecurrentMixer {
 public:
  // Loads model.layers.<layer>.mixer.{in_proj, conv1d, dt_bias, A_log, D, norm, out_proj} and
  // declares its recurrent slot in b.state (its log row: the conv input and raw dt, conv_dim + H
  // floats; the slot (K-1)·conv_dim + H·P·N floats).
  Mamba2Mixer(const LayerBuild& b, int64_t layer);

  // x [m, hidden] (the normed rows of every span, in order) -> y [m, hidden]; advances each
  // span's state by its rows (writing through SequenceState::recurrent_out).
  void forward(const float* x, std::span<const SequenceSpan> spans, float* y) const override;

  size_t weight_bytes() const override;
  size_t own_param_bytes() const override;
 private:
  void rerun(SequenceState& state, float* window, const float* log, int64_t rows) const override;
  int64_t heads_, head_dim_, state_, groups_, chunk_, inter_;
  float dt_min_, dt_max_;
  double eps_;
  DType act_, ssm_dtype_;
  // One row from its conv input pre [conv_dim] and raw dt dr [H]: the conv over window (the
  // previous K-1 pre-conv rows, then shifted to include pre), SiLU into out; dt per head. Forward
  // and replay share it, so a replayed row is the same arithmetic.
  void prepare_row(float* window, const float* pre, const float* dr, float* out, float* dt) const;
  // Head j's scan rows over n rows of xbc [n, conv_dim], dt [n, H], y [n, I].
  kernels::SsmScanRows scan_rows(const float* xbc, const float* dt, float* y, int64_t n, int64_t j) const;
  // The chunked SSD form's rows for the group whose first head is j (same layouts, from pos0).
  kernels::SsdRows ssd_rows(const float* xbc, const float* dt, float* y, int64_t n, int64_t pos0, int64_t j) const;
  // The recurrent scan of one head; `as_decode`: a state kept at the cache dtype is rounded after
  // every row, as decoding the rows one at a time does (else once, at the end).
  void scan_head(const kernels::SsmScanRows& r, float* S, bool as_decode) const;

  std::unique_ptr<Linear> in_, out_;
  std::vector<float> conv_w_;  // [conv_dim, K]
  std::vector<float> conv_b_;  // [conv_dim] (zeros without conv bias)
  std::vector<float> a_, d_, dt_bias_, norm_w_;  // a_ = -exp(A_log)
};

}  // namespace fp4lm::model
