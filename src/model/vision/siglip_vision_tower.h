#pragma once
// The SigLIP vision encoder (transformers 5.24's SiglipVisionModel without its pooling head: the
// `last_hidden_state` that Gemma 3's projector reads), the `vision_tower.vision_model.*` tensors of
// Gemma3ForConditionalGeneration:
//   patch embedding  a Conv2d whose stride is its kernel (patch x patch), i.e. one matmul over each
//                    patch's values (channel, row, column), plus bias; patches row-major;
//   + positions      the learned table of (image_size / patch_size)^2 rows, one per patch (the
//                    processor resizes every image to image_size, so it is never interpolated);
//   layers           x += out_proj(attn(LN1(x))), x += fc2(act(fc1(LN2(x)))), LayerNorm with
//                    layer_norm_eps; attention with q/k/v/out biases, bidirectional over the image's
//                    patches, scale head_dim^-0.5;
//   post_layernorm.
// Linears on the loader's kernels; LayerNorm, the activation and the softmax in float32.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/layers/linear.h"

namespace fp4lm::model {

class ModelLoader;

// config.json's vision_config (SiglipVisionConfig); every key read or refused by name.
struct SiglipVisionConfig {
  int64_t hidden_size = 768, intermediate_size = 3072, num_hidden_layers = 12, num_attention_heads = 12;
  int64_t num_channels = 3, image_size = 224, patch_size = 16;
  std::string hidden_act = "gelu_pytorch_tanh";  // or "gelu" (erf), "gelu_new" (tanh), "quick_gelu"
  double layer_norm_eps = 1e-6;
  bool vision_use_head = true;  // the pooling head: not part of the image features (never run)

  int64_t grid() const { return image_size / patch_size; }  // patches per side
  int64_t patches() const { return grid() * grid(); }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t patch_width() const { return num_channels * patch_size * patch_size; }
};
// `where` names the object in errors ("<dir>/config.json: vision_config").
SiglipVisionConfig parse_siglip_vision_config(const nlohmann::json& j, const std::string& where);

class SiglipVisionTower {
 public:
  struct Layer {
    std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;
    std::unique_ptr<Linear> qkv, out, fc1, fc2;
  };
  struct Weights {
    std::unique_ptr<Linear> patch_embed;  // [hidden, patch_width] + bias
    std::vector<float> pos_embed;         // [patches, hidden]
    std::vector<Layer> layers;
    std::vector<float> post_w, post_b;
  };
  SiglipVisionTower(SiglipVisionConfig config, Weights weights, std::string where);

  // The tensors under `prefix` (e.g. "vision_tower.vision_model."); Error naming a missing or
  // misshaped tensor.
  static SiglipVisionTower load(ModelLoader& l, const std::string& prefix, SiglipVisionConfig config,
                                const std::string& where);

  // pixels: `images` x num_channels x image_size x image_size (channels first, the processor's
  // layout) -> `images` x patches x hidden_size (last_hidden_state).
  std::vector<float> forward(const float* pixels, int64_t images) const;
  const SiglipVisionConfig& config() const { return config_; }

 private:
  SiglipVisionConfig config_;
  Weights w_;
  std::string where_;
};

}  // namespace fp4lm::model
