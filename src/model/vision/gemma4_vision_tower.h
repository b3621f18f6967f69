#pragma once
// Gemma 4's vision encoder (transformers 5.24's Gemma4VisionModel), the `model.vision_tower.*`
// tensors of Gemma4ForConditionalGeneration:
//   patch embedding  input_proj (no bias) over each patch's values scaled to [-1, 1] (2 (x - 0.5):
//                    the processor does not normalize), plus the learned x and y embeddings
//                    position_embedding_table[0][x] + [1][y];
//   layers           x += post_attention_norm(o_proj(attn(input_norm(x)))),
//                    x += post_feedforward_norm(down(act(gate(h)) * up(h))), h = pre_feedforward_norm(x);
//                    Gemma 4's RMSNorm (x / rms · w); q and k RMS-normalized per head (q_norm /
//                    k_norm), v without a weight; the 2-D axial RoPE (first half of a head rotated by
//                    the patch's x, second half by its y); softmax scale 1; bidirectional over the
//                    image's real patches (padding rows are neither keys nor outputs);
//   clipped linears  with use_clipped_linears, each projection's input and output clamped to its
//                    own input_min / input_max / output_min / output_max (read by name, required);
//   pooler           the patch grid averaged over pooling_kernel_size^2 windows, row-major, then
//                    × sqrt(hidden_size) in float32;
//   standardize      (h − std_bias) · std_scale when configured.
// Linears on the loader's kernels; norms, RoPE, the activation and the pooling in float32.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "model/layers/linear.h"
#include "vision/gemma4_preprocess.h"

namespace fp4lm::model {

class ModelLoader;

// config.json's vision_config (Gemma4VisionConfig); every key read, ignored by name or refused.
struct Gemma4VisionConfig {
  int64_t hidden_size = 768, intermediate_size = 3072, num_hidden_layers = 16, num_attention_heads = 12;
  int64_t num_key_value_heads = 12, head_dim = 64;
  double rms_norm_eps = 1e-6;
  double rope_theta = 100.0;
  int64_t pooling_kernel_size = 3, patch_size = 16, position_embedding_size = 10240;
  bool use_clipped_linears = false, standardize = false;

  int64_t patch_width() const { return 3 * patch_size * patch_size; }
};
// `where` names the object in errors ("<dir>/config.json: vision_config").
Gemma4VisionConfig parse_gemma4_vision_config(const nlohmann::json& j, const std::string& where);

// A Gemma4ClippableLinear: the Linear and, when the config clips, its four bounds.
struct ClippedLinear {
  std::unique_ptr<Linear> linear;
  bool clip = false;
  float in_min = 0, in_max = 0, out_min = 0, out_max = 0;
  // y = clamp(W clamp(x)), x: m rows of linear->in_features(); `scratch` holds the clamped input.
  void forward(const float* x, int64_t m, int64_t in, float* y, int64_t out, std::vector<float>& scratch) const;
};

class Gemma4VisionTower {
 public:
  struct Layer {
    std::vector<float> input_norm, post_attention_norm, pre_feedforward_norm, post_feedforward_norm;
    std::vector<float> q_norm, k_norm;
    ClippedLinear q, k, v, o, gate, up, down;
  };
  struct Weights {
    std::unique_ptr<Linear> input_proj;  // [hidden, patch_width]
    std::vector<float> pos_x, pos_y;     // [position_embedding_size, hidden] each
    std::vector<Layer> layers;
    std::vector<float> std_bias, std_scale;  // [hidden] with standardize, else empty
  };
  Gemma4VisionTower(Gemma4VisionConfig config, Weights weights, DType act, std::string where);

  // The tensors under `prefix` ("model.vision_tower."); Error naming a missing or misshaped tensor.
  static Gemma4VisionTower load(ModelLoader& l, const std::string& prefix, Gemma4VisionConfig config,
                                const std::string& where);

  // One image as the processor laid it out -> soft_tokens x hidden_size (last_hidden_state after the
  // pooler and standardization, rounded to the activation dtype). Error naming both sides on
  // pixels that do not fit the tower.
  std::vector<float> forward(const vision::Gemma4Pixels& px) const;
  const Gemma4VisionConfig& config() const { return config_; }

 private:
  Gemma4VisionConfig config_;
  Weights w_;
  DType act_;
  std::string where_;
};

}  // namespace fp4lm::model
