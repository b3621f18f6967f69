#include "model/arch/gemma_ple.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"
#include "model/layers/activation.h"
#include "model/layer_plan.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

GemmaPleNames gemma_ple_names(int64_t layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  return {"model.embed_tokens_per_layer.weight", "model.per_layer_model_projection",
          "model.per_layer_projection_norm.weight", p + "per_layer_input_gate", p + "per_layer_projection",
          p + "post_per_layer_input_norm.weight"};
}

void plan_gemma_ple(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) {
  const GemmaPleNames n = gemma_ple_names(i);
  const int64_t p = c.gemma.ple_dim;
  if (i == 0) out.push_back(plan_linear(n.model_projection, 0, {n.model_projection}, {c.num_layers * p}, c.hidden_size));
  out.push_back(plan_linear(n.gate, i, {n.gate}, {p}, c.hidden_size));
  out.push_back(plan_linear(n.projection, i, {n.projection}, {c.hidden_size}, p));
}

GemmaPleInputs::GemmaPleInputs(ModelLoader& l) : act_(l.dtype()) {
  const ModelConfig& c = l.config();
  const GemmaPleNames n = gemma_ple_names(0);
  layers_ = c.num_layers;
  dim_ = c.gemma.ple_dim;
  hidden_ = c.hidden_size;
  const TensorView& t = l.tensor(n.table, {c.gemma.ple_vocab, layers_ * dim_});
  table_ = Embedding(t);
  table_bytes_ = t.nbytes;
  projection_ = l.load_linear(n.model_projection);
  norm_ = load_rms_norm(l, n.projection_norm, dim_);
  table_rows_ = c.gemma.ple_vocab;
  out_of_table_to_zero_ = c.architecture.starts_with("Gemma3n");
  if (c.architecture == "Gemma4ForConditionalGeneration") {
    // Gemma4Config's / Gemma4TextConfig's defaults where a key is absent.
    const nlohmann::json& top = l.checkpoint().config();
    const auto id = [&](const nlohmann::json& j, const char* key, int64_t def) {
      if (!j.contains(key) || j[key].is_null()) return static_cast<int32_t>(def);
      if (!j[key].is_number_integer())
        fail("{}/config.json: field '{}' must be an integer, found {}", l.checkpoint().dir(), key, j[key].dump());
      return j[key].get<int32_t>();
    };
    for (const auto& [key, def] : {std::pair<const char*, int64_t>{"image_token_id", 258880},
                                   {"video_token_id", 258884},
                                   {"audio_token_id", 258881}})
      multimodal_ids_.push_back(id(top, key, def));
    pad_id_ = id(top.contains("text_config") ? top["text_config"] : top, "pad_token_id", 0);
  }
}

GemmaPleInputs::GemmaPleInputs(ModelLoader& l, Received) : act_(l.dtype()) {
  const ModelConfig& c = l.config();
  layers_ = c.num_layers;
  dim_ = c.gemma.ple_dim;
  hidden_ = c.hidden_size;
}

size_t GemmaPleInputs::own_param_bytes() const { return table_bytes_ + static_cast<size_t>(dim_) * sizeof(float); }

size_t GemmaPleInputs::step_bytes(int64_t rows) const {
  return static_cast<size_t>(rows * layers_ * dim_) * sizeof(float);
}

std::span<const uint8_t> GemmaPleInputs::carried(int64_t rows) const {
  const size_t bytes = step_bytes(rows);
  if (buf_.size() * sizeof(float) != bytes)
    fail("pipeline: Gemma 4's per-layer inputs of this step hold {} bytes, {} rows need {}",
         buf_.size() * sizeof(float), rows, bytes);
  return {reinterpret_cast<const uint8_t*>(buf_.data()), bytes};
}

void GemmaPleInputs::receive(std::span<const uint8_t> bytes, int64_t rows) {
  const size_t want = step_bytes(rows);
  if (bytes.size() != want)
    fail("pipeline: the stage before sent {} bytes of Gemma 4's per-layer inputs, {} rows × {} layers × {} "
         "need {}",
         bytes.size(), rows, layers_, dim_, want);
  buf_.resize(want / sizeof(float));
  std::memcpy(buf_.data(), bytes.data(), want);
}

void GemmaPleInputs::compute(const LayerStep& s) const {
  const size_t size = static_cast<size_t>(s.m * layers_ * dim_);
  std::vector<float> tok(size);
  const int32_t* ids = s.tokens;
  std::vector<int32_t> mapped;
  if (!multimodal_ids_.empty()) {
    mapped.assign(s.tokens, s.tokens + s.m);
    for (int32_t& t : mapped)
      if (std::find(multimodal_ids_.begin(), multimodal_ids_.end(), t) != multimodal_ids_.end()) t = pad_id_;
    ids = mapped.data();
  }
  if (out_of_table_to_zero_) {
    mapped.assign(s.tokens, s.tokens + s.m);
    for (int32_t& t : mapped)
      if (t < 0 || t >= table_rows_) t = 0;
    ids = mapped.data();
  }
  table_.lookup(ids, s.m, tok.data());
  round_to_dtype(tok.data(), size, act_);
  // × sqrt(P), the factor in the activation dtype (transformers casts it to the table's dtype).
  float scale = std::sqrt(static_cast<float>(dim_));
  round_to_dtype(&scale, 1, act_);
  for (float& v : tok) v *= scale;
  round_to_dtype(tok.data(), size, act_);
  buf_.resize(size);
  projection_->forward(s.h, s.m, buf_.data());
  const float inv_root = static_cast<float>(std::pow(static_cast<double>(hidden_), -0.5));
  for (float& v : buf_) v *= inv_root;
  round_to_dtype(buf_.data(), size, act_);
  norm_.forward(buf_.data(), s.m * layers_, buf_.data(), act_);
  for (size_t i = 0; i < size; ++i) buf_[i] += tok[i];
  round_to_dtype(buf_.data(), size, act_);
  const float half_root = static_cast<float>(std::sqrt(0.5));
  for (float& v : buf_) v *= half_root;
  round_to_dtype(buf_.data(), size, act_);
}

GemmaPleBlock::GemmaPleBlock(ModelLoader& l, int64_t layer) : layer_(layer), act_(l.dtype()) {
  const ModelConfig& c = l.config();
  const GemmaPleNames n = gemma_ple_names(layer);
  dim_ = c.gemma.ple_dim;
  hidden_ = c.hidden_size;
  inputs_ = l.shared<GemmaPleInputs>("gemma4.per_layer_inputs", [&] {
    // The first layer of a stage makes them: layer 0 computes them, a later stage's first layer
    // takes them from the stage before; either way they travel on to the stages after.
    auto in = layer == 0 ? std::make_shared<GemmaPleInputs>(l)
                         : std::make_shared<GemmaPleInputs>(l, GemmaPleInputs::Received{});
    if (layer != 0)
      l.log_once(fmt::format("pipeline stage from decoder layer {}: receives Gemma 4's per-layer inputs with the "
                             "residual stream",
                             layer));
    l.carry_across_stages(in);
    return in;
  });
  gate_ = l.load_linear(n.gate);
  projection_ = l.load_linear(n.projection);
  post_ = load_rms_norm(l, n.post_norm, hidden_);
}

size_t GemmaPleBlock::own_param_bytes() const {
  return static_cast<size_t>(hidden_) * sizeof(float) + (layer_ == 0 ? inputs_->own_param_bytes() : 0);
}

void GemmaPleBlock::term(const float* x, int64_t m, float* y, DType act) const {
  std::vector<float> g(static_cast<size_t>(m * dim_));
  gate_->forward(x, m, g.data());
  for (int64_t r = 0; r < m; ++r) {
    float* gr = g.data() + r * dim_;
    for (int64_t c = 0; c < dim_; ++c) gr[c] = gelu_tanh(gr[c]);
    round_to_dtype(gr, static_cast<size_t>(dim_), act);
    const float* in = inputs_->of(layer_, r);
    for (int64_t c = 0; c < dim_; ++c) gr[c] *= in[c];
  }
  round_to_dtype(g.data(), g.size(), act);
  projection_->forward(g.data(), m, y);
  post_.forward(y, m, y, act);
}

void GemmaPleBlock::forward(const LayerStep& s) const {
  term(s.h, s.m, s.y, act_);
  const size_t size = static_cast<size_t>(s.m * hidden_);
  for (size_t i = 0; i < size; ++i) s.h[i] += s.y[i];
  round_to_dtype(s.h, size, act_);
}

}  // namespace fp4lm::model
