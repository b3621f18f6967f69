#include "model/layers/mtp_head.h"

#include <vector>

#include "model/layers/activation.h"
#include "model/arch/arch.h"
#include "model/layer_build.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

MtpHead::MtpHead(ModelLoader& l, const Rope& rope, DType kv_dtype, KvQuant kv_quant) : act_(l.dtype()) {
  state_.set_kv_quant(kv_quant);
  const int64_t layer = l.plan_mtp_head(), hidden = l.config().hidden_size;
  norm_e_ = load_rms_norm(l, "mtp.pre_fc_norm_embedding.weight", hidden);
  norm_h_ = load_rms_norm(l, "mtp.pre_fc_norm_hidden.weight", hidden);
  norm_ = load_rms_norm(l, "mtp.norm.weight", hidden);
  fc_ = l.load_linear("mtp.fc");
  const LayerBuild b{l, rope, state_, kv_dtype};
  layer_ = l.config().arch->make_layer(b, layer);
}

MtpHead::~MtpHead() = default;

size_t MtpHead::own_param_bytes() const {
  return static_cast<size_t>(norm_e_.dim() + norm_h_.dim() + norm_.dim()) * sizeof(float) +
         layer_->own_param_bytes();
}

void MtpHead::forward(const float* e, const float* h, int64_t m, std::span<const SequenceSpan> spans,
                      const int32_t* tokens, float* out) const {
  const int64_t hid = norm_.dim();
  const size_t size = static_cast<size_t>(m * hid);
  // [norm_e(e) ; norm_h(h)] per row, then fc.
  std::vector<float> cat(2 * size), a(size), b(size);
  norm_e_.forward(e, m, a.data(), act_);
  norm_h_.forward(h, m, b.data(), act_);
  for (int64_t r = 0; r < m; ++r) {
    std::copy_n(a.data() + r * hid, hid, cat.data() + 2 * r * hid);
    std::copy_n(b.data() + r * hid, hid, cat.data() + (2 * r + 1) * hid);
  }
  std::vector<float> u(size), x(size), y(size);
  fc_->forward(cat.data(), m, u.data());
  round_to_dtype(u.data(), size, act_);
  layer_->forward(LayerStep{u.data(), m, spans, tokens, act_, x.data(), y.data()});
  norm_.forward(u.data(), m, out, act_);
}

}  // namespace fp4lm::model
