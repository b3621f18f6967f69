#include "model/layers/nemotron_moe.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "model/layers/activation.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

NemotronMoe::NemotronMoe(ModelLoader& loader, const std::string& block)
    : router_(loader, block + ".gate", block + ".gate.e_score_correction_bias", sigmoid_routing(loader.config()),
              DType::F32),
      hidden_(loader.config().hidden_size),
      width_(loader.config().mamba.moe_latent_size > 0 ? loader.config().mamba.moe_latent_size
                                                        : loader.config().hidden_size),
      act_(loader.dtype()) {
  const ModelConfig& c = loader.config();
  if (c.mamba.moe_latent_size > 0) fc1_ = loader.load_linear(block + ".fc1_latent_proj");
  for (int64_t e = 0; e < c.moe.num_experts; ++e)
    experts_.push_back(std::make_unique<Relu2Mlp>(loader, fmt::format("{}.experts.{}", block, e)));
  if (c.mamba.moe_latent_size > 0) fc2_ = loader.load_linear(block + ".fc2_latent_proj");
  shared_ = std::make_unique<Relu2Mlp>(loader, block + ".shared_experts");
}

size_t NemotronMoe::weight_bytes() const {
  size_t b = router_.weight_bytes() + router_.own_param_bytes() + shared_->weight_bytes();
  for (const auto& e : experts_) b += e->weight_bytes();
  if (fc1_) b += fc1_->weight_bytes() + fc2_->weight_bytes();
  return b;
}

void NemotronMoe::forward(const float* x, int64_t m, float* y) const {
  const int64_t k = router_.top_k();
  std::vector<int32_t> ids(static_cast<size_t>(m * k));
  std::vector<float> weights(ids.size());
  router_.route(x, m, ids.data(), weights.data());
  // The routed experts' input: the block's input, or its latent projection.
  std::vector<float> latent_in;
  const float* xe = x;
  if (fc1_) {
    latent_in.resize(static_cast<size_t>(m * width_));
    fc1_->forward(x, m, latent_in.data());
    xe = latent_in.data();
  }
  // The (row, weight) pairs of each expert, rows ascending.
  const int64_t n_experts = static_cast<int64_t>(experts_.size());
  std::vector<std::vector<std::pair<int64_t, float>>> routed(static_cast<size_t>(n_experts));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[static_cast<size_t>(r * k + j)];
      if (e < 0 || e >= n_experts) fail("MoE: expert id {} out of range [0, {})", e, n_experts);
      routed[static_cast<size_t>(e)].push_back({r, weights[static_cast<size_t>(r * k + j)]});
    }
  // Each expert on its rows; a row's weighted outputs summed in float32 in expert-id order (as
  // transformers' index_add_ over the hit experts), so a row's result does not depend on the
  // other rows of the call; rounded once to the activation dtype.
  std::vector<float> acc(static_cast<size_t>(m * width_), 0.0f), rows_in, rows_out;
  for (int64_t e = 0; e < n_experts; ++e) {
    const auto& rw = routed[static_cast<size_t>(e)];
    if (rw.empty()) continue;
    const int64_t n = static_cast<int64_t>(rw.size());
    rows_in.resize(static_cast<size_t>(n * width_));
    rows_out.resize(rows_in.size());
    for (int64_t i = 0; i < n; ++i) std::copy_n(xe + rw[i].first * width_, width_, rows_in.data() + i * width_);
    experts_[static_cast<size_t>(e)]->forward(rows_in.data(), n, rows_out.data());
    for (int64_t i = 0; i < n; ++i) {
      float* a = acc.data() + rw[i].first * width_;
      const float* o = rows_out.data() + i * width_;
      for (int64_t c = 0; c < width_; ++c) a[c] += rw[i].second * o[c];
    }
  }
  round_to_dtype(acc.data(), acc.size(), act_);
  if (fc2_) fc2_->forward(acc.data(), m, y);
  else std::copy(acc.begin(), acc.end(), y);
  std::vector<float> s(static_cast<size_t>(m * hidden_));
  shared_->forward(x, m, s.data());
  for (size_t i = 0; i < s.size(); ++i) y[i] += s[i];
  round_to_dtype(y, s.size(), act_);
}

}  // namespace fp4lm::model
