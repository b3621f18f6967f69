#pragma once
// One row per decoder layer saying how its attention sees the sequence: the kind (full causal,
// a sliding window, fixed chunks, or no attention at all on a recurrent layer), the window or
// chunk size, the layer's own head_dim and KV heads, the earlier layer whose K/V it reads (K/V
// shared between layers), and its position encoding (RoPE base, or none: NoPE). The shared config
// parser starts it as `num_layers` full-attention rows; each ArchDef's parse_config fills what its
// config says (layer_types, its own patterns); complete_attention_table then fills the config's
// shape into what was left open. The attention layers, the KV cache slots they declare and
// `inspect` read it. The anchors are llama.cpp's swa_type / swa_layers and vLLM's per-layer
// sliding_window.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace fp4lm::model {

struct ConfigReader;

enum class AttentionKind {
  none,     // the layer has no attention (a recurrent or MLP-only layer of a hybrid)
  full,     // every earlier position
  sliding,  // the last `window` positions, its own included (a ring in the KV cache)
  chunked,  // the positions of its own chunk of `window` (Llama 4's attention_chunk_size)
};
const char* attention_kind_name(AttentionKind k);

struct AttentionLayerSpec {
  AttentionKind kind = AttentionKind::full;
  int64_t window = 0;  // sliding: the window; chunked: the chunk size; else 0
  int64_t head_dim = 0, kv_heads = 0;  // this layer's (0 until complete_attention_table: the config's)
  int64_t kv_source = -1;  // >= 0: the earlier layer whose K/V this one reads (it stores none)
  bool rope = true;        // false: no position encoding (NoPE)
  double rope_theta = 0;   // this layer's RoPE base (0 until complete_attention_table: the config's)

  // The window a KV slot of this layer keeps (0: every position).
  int64_t sliding_window() const { return kind == AttentionKind::sliding ? window : 0; }
  int64_t chunk() const { return kind == AttentionKind::chunked ? window : 0; }
  bool operator==(const AttentionLayerSpec&) const = default;
};

class AttentionTable {
 public:
  AttentionTable() = default;
  explicit AttentionTable(int64_t num_layers) : layers_(static_cast<size_t>(num_layers)) {}
  int64_t size() const { return static_cast<int64_t>(layers_.size()); }
  // Error naming the layer when i is outside the table.
  const AttentionLayerSpec& operator[](int64_t i) const;
  AttentionLayerSpec& operator[](int64_t i);
  const std::vector<AttentionLayerSpec>& layers() const { return layers_; }
  // Per layer: whether it is of kind k.
  std::vector<bool> is(AttentionKind k) const;
  bool any(AttentionKind k) const;
  // Per layer: kv_source.
  std::vector<int64_t> kv_sources() const;
  // Every layer of kind `from` becomes `to` with this window (Mistral's and Phi-3's one window).
  void set_kind(AttentionKind from, AttentionKind to, int64_t window);

 private:
  std::vector<AttentionLayerSpec> layers_;
};

// config.json's layer_types: one name per layer, each mapped to its kind by `names` (e.g.
// {"sliding_attention", sliding}, {"full_attention", full}). Error naming `layer_types` and the
// entry for a list of the wrong length or a name not in `names`. `at_least`: a longer list is
// accepted (Llama 4's configs), its extra entries unread.
std::vector<AttentionKind> read_layer_types(const ConfigReader& r, int64_t num_layers,
                                            std::initializer_list<std::pair<const char*, AttentionKind>> names,
                                            bool at_least = false);
// Sets the kind of each layer from layer_types (read_layer_types), the sliding / chunked ones
// with `window`.
void set_layer_kinds(AttentionTable& t, const std::vector<AttentionKind>& kinds, int64_t window);

// Fills what the architecture left open: head_dim, kv_heads and rope_theta 0 become the config's.
void complete_attention_table(AttentionTable& t, int64_t head_dim, int64_t kv_heads, double rope_theta);

}  // namespace fp4lm::model
