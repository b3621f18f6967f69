#include "model/arch/arch.h"

#include <algorithm>

#include <fmt/format.h>

#include "model/layers/attention.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

std::vector<LayerParam> ArchDef::layer_params(const ModelConfig& c, int64_t i) const {
  const PreNormNames n = pre_norm_names(i);
  std::vector<LayerParam> out = {{n.input, {c.hidden_size}}, {n.post, {c.hidden_size}}};
  if (c.qk_norm) {
    const std::string p = fmt::format("model.layers.{}.", i);
    out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
    out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
  }
  return out;
}

std::unique_ptr<DecoderLayer> ArchDef::make_layer(const LayerBuild& b, int64_t i) const {
  const int64_t hidden = b.loader.config().hidden_size;
  const PreNormNames n = pre_norm_names(i);
  RmsNorm input = load_rms_norm(b.loader, n.input, hidden), post = load_rms_norm(b.loader, n.post, hidden);
  std::unique_ptr<Mixer> mixer = make_mixer(b, i);
  return std::make_unique<PreNormLayer>(std::move(input), std::move(mixer), std::move(post), make_ffn(b.loader, i));
}

std::unique_ptr<Mixer> ArchDef::make_mixer(const LayerBuild& b, int64_t i) const {
  return std::make_unique<Attention>(b, i, AttentionLayout{.window = b.loader.config().attention[i].sliding_window()});
}

int64_t ArchDef::kv_source(const ModelConfig& c, int64_t i) const {
  return i >= 0 && i < c.attention.size() ? c.attention[i].kv_source : -1;
}

std::vector<int64_t> kv_read_across(const ModelConfig& c, int64_t cut) {
  std::vector<int64_t> out;
  for (int64_t i = std::max<int64_t>(cut, 0); i < c.num_layers; ++i)
    if (const int64_t j = c.arch->kv_source(c, i); j >= 0 && j < cut) out.push_back(j);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

namespace {
std::vector<const ArchDef*>& registered() {
  static std::vector<const ArchDef*> r;
  return r;
}
}  // namespace

ArchRegistration::ArchRegistration(const ArchDef& def) : def_(&def) { registered().push_back(def_); }

ArchRegistration::~ArchRegistration() {
  auto& r = registered();
  r.erase(std::find(r.begin(), r.end(), def_));
}

const ArchDef* find_arch(std::string_view hf_name) {
  for (const ArchDef* a : registered())
    if (a->hf_name() == hf_name) return a;
  for (const ArchDef* a : architectures())
    if (a->hf_name() == hf_name) return a;
  return nullptr;
}

}  // namespace fp4lm::model
