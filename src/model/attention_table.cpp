#include "model/attention_table.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "model/config_reader.h"

namespace fp4lm::model {

const char* attention_kind_name(AttentionKind k) {
  switch (k) {
    case AttentionKind::none: return "none";
    case AttentionKind::full: return "full";
    case AttentionKind::sliding: return "sliding";
    case AttentionKind::chunked: return "chunked";
  }
  return "?";
}

const AttentionLayerSpec& AttentionTable::operator[](int64_t i) const {
  if (i < 0 || i >= size()) fail("attention table: layer {} outside the {} decoder layers", i, size());
  return layers_[static_cast<size_t>(i)];
}

AttentionLayerSpec& AttentionTable::operator[](int64_t i) {
  if (i < 0 || i >= size()) fail("attention table: layer {} outside the {} decoder layers", i, size());
  return layers_[static_cast<size_t>(i)];
}

std::vector<bool> AttentionTable::is(AttentionKind k) const {
  std::vector<bool> out;
  for (const AttentionLayerSpec& l : layers_) out.push_back(l.kind == k);
  return out;
}

bool AttentionTable::any(AttentionKind k) const {
  return std::any_of(layers_.begin(), layers_.end(), [k](const AttentionLayerSpec& l) { return l.kind == k; });
}

std::vector<int64_t> AttentionTable::kv_sources() const {
  std::vector<int64_t> out;
  for (const AttentionLayerSpec& l : layers_) out.push_back(l.kv_source);
  return out;
}

void AttentionTable::set_kind(AttentionKind from, AttentionKind to, int64_t window) {
  for (AttentionLayerSpec& l : layers_)
    if (l.kind == from) {
      l.kind = to;
      l.window = window;
    }
}

std::vector<AttentionKind> read_layer_types(const ConfigReader& r, int64_t num_layers,
                                            std::initializer_list<std::pair<const char*, AttentionKind>> names,
                                            bool at_least) {
  const nlohmann::json& t = r.j["layer_types"];
  const int64_t n = t.is_array() ? static_cast<int64_t>(t.size()) : -1;
  if (n < 0 || (at_least ? n < num_layers : n != num_layers))
    fail("{}: field 'layer_types': layer_types must list one type per layer ({}), found {}", r.path, num_layers,
         t.dump());
  std::string expected;
  for (const auto& [name, kind] : names) expected += fmt::format("{}\"{}\"", expected.empty() ? "" : " or ", name);
  std::vector<AttentionKind> out;
  for (int64_t i = 0; i < num_layers; ++i) {
    const nlohmann::json& v = t[static_cast<size_t>(i)];
    const auto it = std::find_if(names.begin(), names.end(), [&](const auto& p) { return v == p.first; });
    if (it == names.end())
      fail("{}: field 'layer_types': layer_types[{}] is {} (expected {})", r.path, i, v.dump(), expected);
    out.push_back(it->second);
  }
  return out;
}

void set_layer_kinds(AttentionTable& t, const std::vector<AttentionKind>& kinds, int64_t window) {
  for (int64_t i = 0; i < t.size() && i < static_cast<int64_t>(kinds.size()); ++i) {
    const AttentionKind k = kinds[static_cast<size_t>(i)];
    t[i].kind = k;
    t[i].window = k == AttentionKind::sliding || k == AttentionKind::chunked ? window : 0;
  }
}

void complete_attention_table(AttentionTable& t, int64_t head_dim, int64_t kv_heads, double rope_theta) {
  for (int64_t i = 0; i < t.size(); ++i) {
    AttentionLayerSpec& l = t[i];
    if (l.kind == AttentionKind::none) continue;  // no attention: no shape
    if (l.head_dim == 0) l.head_dim = head_dim;
    if (l.kv_heads == 0) l.kv_heads = kv_heads;
    if (l.rope_theta == 0) l.rope_theta = rope_theta;
  }
}

}  // namespace fp4lm::model
