#include "model/vision/gemma4_mm_embedder.h"

#include <cmath>

#include "core/thread_pool.h"
#include "model/layer_plan.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

Gemma4MmEmbedder Gemma4MmEmbedder::load(ModelLoader& l, const std::string& p, int64_t vision_hidden,
                                        int64_t text_hidden, double eps) {
  Gemma4MmEmbedder e;
  e.vision_hidden_ = vision_hidden;
  e.text_hidden_ = text_hidden;
  e.eps_ = eps;
  e.proj_ = l.load_extra_linear(
      plan_linear(p + "embedding_projection", -1, {p + "embedding_projection"}, {text_hidden}, vision_hidden));
  return e;
}

std::vector<float> Gemma4MmEmbedder::forward(const float* x, int64_t rows) const {
  const int64_t V = vision_hidden_;
  std::vector<float> normed(static_cast<size_t>(rows * V));
  // Gemma4RMSNorm(with_scale=False): x · (mean(x^2) + eps)^-0.5 in float32.
  ThreadPool::global().parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < V; ++i) ss += static_cast<double>(x[r * V + i]) * x[r * V + i];
      const auto inv = static_cast<float>(
          std::pow(static_cast<float>(ss / static_cast<double>(V)) + static_cast<float>(eps_), -0.5));
      for (int64_t i = 0; i < V; ++i) normed[static_cast<size_t>(r * V + i)] = x[r * V + i] * inv;
    }
  });
  std::vector<float> out(static_cast<size_t>(rows * text_hidden_));
  proj_->forward(normed.data(), rows, out.data());
  return out;
}

}  // namespace fp4lm::model
