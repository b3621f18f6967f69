#pragma once
// What Gemma 3 and Gemma 4 share (arch/gemma3.cpp, arch/gemma4.cpp): the decoder layer with four
// norms — h += post_attention_norm(attention(input_norm(h))); h += post_feedforward_norm(
// mlp(pre_feedforward_norm(h))) (Gemma 4: then h ×= layer_scalar; with the MoE block, the MLP's
// output joined by the experts', arch/gemma_moe.h) — whose attention uses the RoPE of its layer
// type (sliding or full), the names of those norms, and the parsing of the per-type keys (layer_types,
// sliding_window, RoPE per type in either config form). Norms are Gemma's: computed in float32,
// rounded once (ModelConfig::norm_rounds_once).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/arch/arch.h"
#include "model/arch/gemma_moe.h"
#include "model/arch/gemma_ple.h"
#include "model/layers/decoder_layer.h"
#include "model/layers/rope.h"

namespace fp4lm::model {

struct GemmaNormNames {
  std::string input, post_attention, pre_feedforward, post_feedforward;
};
GemmaNormNames gemma_norm_names(int64_t layer);

class GemmaLayer final : public DecoderLayer {
 public:
  GemmaLayer(std::unique_ptr<Rope> rope, RmsNorm input, std::unique_ptr<Mixer> attention, RmsNorm post_attention,
             RmsNorm pre_feedforward, std::unique_ptr<FeedForward> mlp, RmsNorm post_feedforward,
             float layer_scalar = 1.0f, std::unique_ptr<GemmaMoeBlock> moe = nullptr,
             std::unique_ptr<GemmaPleBlock> ple = nullptr)
      : rope_(std::move(rope)), input_(std::move(input)), post_attention_(std::move(post_attention)),
        pre_feedforward_(std::move(pre_feedforward)), post_feedforward_(std::move(post_feedforward)),
        attention_(std::move(attention)), mlp_(std::move(mlp)), moe_(std::move(moe)), ple_(std::move(ple)),
        layer_scalar_(layer_scalar) {}
  void forward(const LayerStep& s) const override;
  size_t own_param_bytes() const override;

 private:
  std::unique_ptr<Rope> rope_;  // the attention's (it keeps a reference)
  RmsNorm input_, post_attention_, pre_feedforward_, post_feedforward_;
  std::unique_ptr<Mixer> attention_;
  std::unique_ptr<FeedForward> mlp_;
  std::unique_ptr<GemmaMoeBlock> moe_;  // Gemma 4 MoE: beside the MLP; null for dense layers
  std::unique_ptr<GemmaPleBlock> ple_;  // Gemma 4 per-layer inputs; null without them
  float layer_scalar_;  // Gemma 4: the layer's output h × layer_scalar (rounded); 1 = none
};

// layer_types (list of "sliding_attention" / "full_attention", one per layer; absent: every
// `pattern`-th layer full, the others sliding) and sliding_window into c.attention; Error naming
// the field otherwise.
void read_gemma_layer_types(const ConfigReader& r, ModelConfig& c, int64_t pattern);
// RoPE per layer type: transformers 5's rope_parameters {sliding_attention: {...},
// full_attention: {...}} (rope_type default or linear, rope_theta, factor), or the older
// rope_theta + rope_scaling (full layers) and `local_theta_key` (sliding layers, default
// `local_theta`).
void read_gemma_rope(const ConfigReader& r, ModelConfig& c, const char* local_theta_key, double local_theta);
// num_kv_shared_layers (Gemma 4, Gemma 3n; transformers' kv_sharing_modes) into c.attention's
// kv_source: the last n layers read the K/V of the last earlier (unshared) layer of their own
// type, whose head_dim / kv_heads (filled before) must be theirs.
void read_gemma_kv_sharing(const ConfigReader& r, ModelConfig& c);
// The RoPE of layer i's type over `dim` dims.
std::unique_ptr<Rope> gemma_rope(const ModelConfig& c, int64_t i, int64_t dim);

}  // namespace fp4lm::model
