#include "model/vision/gemma3_mm_projector.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/thread_pool.h"
#include "model/load/model_loader.h"
#include "model/vision/qwen3_5_vision_tower.h"

namespace fp4lm::model {

Gemma3MmProjector Gemma3MmProjector::load(ModelLoader& l, const std::string& p, int64_t grid, int64_t tokens,
                                          int64_t vision_hidden, int64_t text_hidden, double eps,
                                          const std::string& where) {
  Gemma3MmProjector r;
  r.side_ = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(tokens))));
  if (tokens <= 0 || r.side_ * r.side_ != tokens)
    fail("{}: mm_tokens_per_image {} is not a square (the projector pools the patch grid to side x side tokens)",
         where, tokens);
  if (grid % r.side_ != 0)
    fail("{}: the vision tower's {} x {} patch grid (image_size / patch_size) does not pool evenly to "
         "mm_tokens_per_image {} ({} per side)",
         where, grid, grid, tokens, r.side_);
  r.grid_ = grid;
  r.kernel_ = grid / r.side_;
  r.vision_hidden_ = vision_hidden;
  r.text_hidden_ = text_hidden;
  r.eps_ = eps;
  r.norm_w_ = l.tensor_f32(p + "mm_soft_emb_norm.weight", {vision_hidden});
  const std::string name = p + "mm_input_projection_weight";
  const TensorView& t = l.tensor(name, {vision_hidden, text_hidden});
  // x @ W is a Linear whose weight is W transposed; transposed element by element in its dtype.
  const size_t es = dtype_size(t.dtype);
  auto bytes = std::make_shared<std::vector<uint8_t>>(t.nbytes);
  for (int64_t i = 0; i < vision_hidden; ++i)
    for (int64_t o = 0; o < text_hidden; ++o)
      std::memcpy(bytes->data() + static_cast<size_t>(o * vision_hidden + i) * es,
                  t.data + static_cast<size_t>(i * text_hidden + o) * es, es);
  r.proj_ = dense_linear(name, bytes->data(), t.dtype, text_hidden, vision_hidden, {}, l.dtype(), bytes);
  return r;
}

std::vector<float> Gemma3MmProjector::forward(const float* x, int64_t images) const {
  const int64_t T = tokens(), V = vision_hidden_, k = kernel_, rows = images * T;
  std::vector<float> pooled(static_cast<size_t>(rows * V), 0.0f);
  ThreadPool::global().parallel_for(rows, [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t img = r / T, ty = (r % T) / side_, tx = r % side_;
      float* dst = pooled.data() + r * V;
      for (int64_t dy = 0; dy < k; ++dy)
        for (int64_t dx = 0; dx < k; ++dx) {
          const float* src = x + (img * grid_ * grid_ + (ty * k + dy) * grid_ + tx * k + dx) * V;
          for (int64_t i = 0; i < V; ++i) dst[i] += src[i];
        }
      const float inv = 1.0f / static_cast<float>(k * k);
      double ss = 0;
      for (int64_t i = 0; i < V; ++i) {
        dst[i] *= inv;
        ss += static_cast<double>(dst[i]) * dst[i];
      }
      const float scale = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(V) + eps_));
      for (int64_t i = 0; i < V; ++i) dst[i] = dst[i] * scale * (1.0f + norm_w_[static_cast<size_t>(i)]);
    }
  });
  std::vector<float> out(static_cast<size_t>(rows * text_hidden_));
  proj_->forward(pooled.data(), rows, out.data());
  return out;
}

}  // namespace fp4lm::model
