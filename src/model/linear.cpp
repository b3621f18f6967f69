#include "model/linear.h"

#include <vector>

#include "model/finite_check.h"

namespace fp4lm::model {

namespace {
// Round-trips float32 activations through the layer's activation dtype around a kernel call.
template <typename Call>
void with_act_dtype(DType t, const float* x, size_t nx, float* y, size_t ny, Call call) {
  if (t == DType::F32) return call(static_cast<const void*>(x), static_cast<void*>(y));
  const size_t es = dtype_size(t);
  std::vector<uint8_t> xb(nx * es), yb(ny * es);
  from_f32_n(x, t, xb.data(), nx);
  call(static_cast<const void*>(xb.data()), static_cast<void*>(yb.data()));
  to_f32_n(yb.data(), t, y, ny);
}
}  // namespace

Linear::Linear(LayerSpec spec, LayerScheme scheme, std::string backend, std::unique_ptr<kernels::LinearKernel> kernel)
    : spec_(std::move(spec)), scheme_(scheme), backend_(std::move(backend)), kernel_(std::move(kernel)) {}

void Linear::forward(const float* x, int64_t m, float* y, ThreadPool& pool) const {
  // Before the kernel: every backend then fails the same way (W4A16 would compute NaN, the W4A4
  // quantizer would throw its own error, possibly on a worker thread).
  check_finite(x, m, spec_.in_features, "the input of ", spec_.name);
  if (observer_) observer_(x, m);
  with_act_dtype(scheme_.act_dtype, x, static_cast<size_t>(m * spec_.in_features), y,
                 static_cast<size_t>(m * spec_.out_features),
                 [&](const void* xb, void* yb) { kernel_->forward(xb, m, yb, pool); });
}

FusedMoe::FusedMoe(LayerSpec spec, LayerScheme scheme, std::string backend, std::unique_ptr<kernels::MoeKernel> kernel)
    : spec_(std::move(spec)), scheme_(scheme), backend_(std::move(backend)), kernel_(std::move(kernel)) {}

void FusedMoe::forward(const float* x, int64_t m, const int32_t* topk_ids, const float* topk_weights, int64_t top_k,
                       float* y, ThreadPool& pool) const {
  check_finite(x, m, spec_.hidden, "the input of ", spec_.name);
  if (observer_) observer_(x, m, topk_ids, top_k);
  const size_t count = static_cast<size_t>(m * spec_.hidden);
  with_act_dtype(scheme_.act_dtype, x, count, y, count, [&](const void* xb, void* yb) {
    kernel_->forward(xb, m, topk_ids, topk_weights, top_k, yb, pool);
  });
}

}  // namespace fp4lm::model
