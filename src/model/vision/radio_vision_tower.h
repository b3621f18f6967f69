#pragma once
// NVIDIA's C-RADIO vision encoder as transformers 5.24's RadioModel runs it for Nemotron VL / Omni
// (the packed image path, the input conditioner external: the processor normalizes), over the
// tensors of the published layout (vision_model.radio_model.model.*, which transformers also saves):
//   patch_generator.embedder   a bias-free Linear over each patch's values (channel, row, column);
//   + pos_embed                the learned (max_img_size / patch)^2 table as a square grid,
//                              bilinearly resized (align_corners=False, float32) to max(h, w) per
//                              side and cropped to the image's h x w patches;
//   cls_token.token            num_cls_tokens + num_registers rows put before the patches;
//   blocks                     x += ls1 * proj(attn(LN1(x))), x += ls2 * fc2(gelu(fc1(LN2(x)))):
//                              fused qkv with bias, bidirectional over the image's tokens, scale
//                              head_dim^-0.5, LayerScale lambda1 (layerscale_value when absent);
// the features are the patch rows of the last block's output (the prefix rows dropped).
// Linears on the loader's kernels; LayerNorm, GELU and the softmax in float32.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/layers/linear.h"

namespace fp4lm::model {

class ModelLoader;

// config.json's vision_config (transformers' RadioConfig); every key read or refused by name.
struct RadioVisionConfig {
  int64_t hidden_size = 1280, num_hidden_layers = 32, num_attention_heads = 16;
  double mlp_ratio = 4.0;
  std::string hidden_act = "gelu";  // or gelu_pytorch_tanh
  double layer_norm_eps = 1e-6;
  bool qkv_bias = true;
  double layerscale_value = 1.0;
  int64_t num_channels = 3, patch_size = 16, max_img_size = 2048, num_cls_tokens = 3, num_registers = 7;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }
  int64_t intermediate() const { return static_cast<int64_t>(static_cast<double>(hidden_size) * mlp_ratio); }
  int64_t patch_dim() const { return num_channels * patch_size * patch_size; }
  int64_t prefix_tokens() const { return num_cls_tokens + num_registers; }
  int64_t max_grid() const { return max_img_size / patch_size; }  // the position table's side
};
RadioVisionConfig parse_radio_vision_config(const nlohmann::json& j, const std::string& where);

class RadioVisionTower {
 public:
  struct Layer {
    std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b, ls1, ls2;
    std::unique_ptr<Linear> qkv, proj, fc1, fc2;
  };
  struct Weights {
    std::unique_ptr<Linear> embedder;  // [hidden, patch_dim], no bias
    std::vector<float> pos_embed;      // [max_grid^2, hidden]
    std::vector<float> prefix;         // [prefix_tokens, hidden]
    std::vector<Layer> layers;
  };
  RadioVisionTower(RadioVisionConfig config, Weights weights);

  // The tensors under `prefix` ("vision_model.radio_model.model."); Error naming a missing or
  // misshaped tensor.
  static RadioVisionTower load(ModelLoader& l, const std::string& prefix, RadioVisionConfig config);

  // One image: `patches` = grid_h * grid_w rows of patch_dim values (the processor's layout) ->
  // grid_h * grid_w rows of hidden_size features.
  std::vector<float> forward(const float* patches, int64_t grid_h, int64_t grid_w) const;
  // The position rows of a grid_h x grid_w image (the resized, cropped table): [h * w, hidden].
  std::vector<float> positions(int64_t grid_h, int64_t grid_w) const;
  const RadioVisionConfig& config() const { return config_; }

 private:
  RadioVisionConfig config_;
  Weights w_;
};

}  // namespace fp4lm::model
