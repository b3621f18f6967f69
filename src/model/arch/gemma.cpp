#include "model/arch/gemma.h"

#include <fmt/format.h>

#include "core/error.h"
#include "model/layers/activation.h"

namespace fp4lm::model {

GemmaNormNames gemma_norm_names(int64_t layer) {
  const std::string p = fmt::format("model.layers.{}.", layer);
  return {p + "input_layernorm.weight", p + "post_attention_layernorm.weight", p + "pre_feedforward_layernorm.weight",
          p + "post_feedforward_layernorm.weight"};
}

void GemmaLayer::forward(const LayerStep& s) const {
  if (ple_) ple_->begin(s);
  add_residual(s, input_, [&](const float* x, float* y) {
    attention_->forward(x, s.spans, y);
    post_attention_.forward(y, s.m, y, s.act);
  });
  add_residual(s, pre_feedforward_, [&](const float* x, float* y) {
    mlp_->forward(x, s.m, y);
    if (moe_) moe_->forward(s.h, s.m, y);  // s.h: still the residual stream before this half
    post_feedforward_.forward(y, s.m, y, s.act);
  });
  if (ple_) ple_->forward(s);
  if (layer_scalar_ != 1.0f) {
    const size_t size = static_cast<size_t>(s.m) * static_cast<size_t>(input_.dim());
    for (size_t i = 0; i < size; ++i) s.h[i] *= layer_scalar_;
    round_to_dtype(s.h, size, s.act);
  }
}

size_t GemmaLayer::own_param_bytes() const {
  return static_cast<size_t>(input_.dim() + post_attention_.dim() + pre_feedforward_.dim() + post_feedforward_.dim()) *
             sizeof(float) +
         attention_->own_param_bytes() + (moe_ ? moe_->own_param_bytes() : 0) +
         (ple_ ? ple_->own_param_bytes() : 0);
}

void read_gemma_layer_types(const ConfigReader& r, ModelConfig& c, int64_t pattern) {
  std::vector<AttentionKind> kinds;
  if (r.has("layer_types")) {
    kinds = read_layer_types(r, c.num_layers,
                             {{"sliding_attention", AttentionKind::sliding}, {"full_attention", AttentionKind::full}});
  } else {
    r.positive("sliding_window_pattern", pattern);
    for (int64_t i = 0; i < c.num_layers; ++i)
      kinds.push_back((i + 1) % pattern != 0 ? AttentionKind::sliding : AttentionKind::full);
  }
  const int64_t window = r.req<int64_t>("sliding_window");
  r.positive("sliding_window", window);
  set_layer_kinds(c.attention, kinds, window);
}

namespace {
// One rope_parameters entry: rope_type default (no scaling), linear (factor) or proportional.
void read_rope_entry(const ConfigReader& r, const char* key, double& theta, RopeScaling& scaling) {
  const nlohmann::json& e = r.j["rope_parameters"][key];
  if (!e.is_object()) fail("{}: field 'rope_parameters.{}' must be an object, found {}", r.path, key, e.dump());
  ConfigReader er{e, r.path};
  theta = er.opt<double>("rope_theta", theta);
  const std::string type = er.opt<std::string>("rope_type", "default");
  scaling = {};
  if (type == "linear") {
    scaling.type = type;
    scaling.factor = er.req<double>("factor");
    if (!(scaling.factor > 0)) fail("{}: field 'rope_parameters.{}.factor' must be > 0", r.path, key);
  } else if (type == "proportional") {  // Gemma 4's full layers
    scaling.type = type;
    scaling.factor = er.opt<double>("factor", 1.0);
    scaling.partial_rotary_factor = er.opt<double>("partial_rotary_factor", 1.0);
    if (!(scaling.factor > 0) || !(scaling.partial_rotary_factor > 0) || scaling.partial_rotary_factor > 1)
      fail("{}: rope_parameters.{}: factor must be > 0 and partial_rotary_factor in (0, 1]", r.path, key);
  } else if (type != "default") {
    fail("{}: unsupported rope_parameters.{}.rope_type '{}' (supported: default, linear, proportional)", r.path, key,
         type);
  }
}
}  // namespace

void read_gemma_rope(const ConfigReader& r, ModelConfig& c, const char* local_theta_key, double local_theta) {
  c.gemma.local_rope_theta = r.opt<double>(local_theta_key, local_theta);
  c.gemma.local_rope_scaling = {};
  if (r.has("rope_parameters") && r.j["rope_parameters"].contains("full_attention")) {
    read_rope_entry(r, "full_attention", c.rope_theta, c.rope_scaling);
    if (r.j["rope_parameters"].contains("sliding_attention"))
      read_rope_entry(r, "sliding_attention", c.gemma.local_rope_theta, c.gemma.local_rope_scaling);
  }
  if (!(c.gemma.local_rope_theta > 0)) fail("{}: the sliding layers' rope_theta must be > 0", r.path);
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.attention[i].rope_theta = c.attention[i].kind == AttentionKind::sliding ? c.gemma.local_rope_theta : c.rope_theta;
}

void read_gemma_kv_sharing(const ConfigReader& r, ModelConfig& c) {
  const int64_t shared = r.opt<int64_t>("num_kv_shared_layers", 0);
  if (shared < 0 || shared >= c.num_layers)
    fail("{}: num_kv_shared_layers = {} must be in [0, num_hidden_layers = {}): the shared layers read the K/V "
         "of earlier ones",
         r.path, shared, c.num_layers);
  AttentionTable& t = c.attention;
  const int64_t first = c.num_layers - shared;
  for (int64_t i = first; i < c.num_layers; ++i) {
    const bool sliding = t[i].kind == AttentionKind::sliding;
    int64_t j = first - 1;
    while (j >= 0 && (t[j].kind == AttentionKind::sliding) != sliding) --j;
    if (j < 0)
      fail("{}: num_kv_shared_layers = {}: layer {} ({}) has no earlier {} layer to read K/V from", r.path, shared,
           i, sliding ? "sliding" : "full", sliding ? "sliding" : "full");
    if (t[i].head_dim != t[j].head_dim || t[i].kv_heads != t[j].kv_heads)
      fail("{}: num_kv_shared_layers: layer {} reads the K/V of layer {}, whose head_dim / KV heads differ", r.path,
           i, j);
    t[i].kv_source = j;
  }
}

std::unique_ptr<Rope> gemma_rope(const ModelConfig& c, int64_t i, int64_t dim) {
  if (c.attention[i].kind == AttentionKind::sliding)
    return std::make_unique<Rope>(dim, c.gemma.local_rope_theta, c.gemma.local_rope_scaling);
  return std::make_unique<Rope>(dim, c.rope_theta, c.rope_scaling);
}

}  // namespace fp4lm::model
