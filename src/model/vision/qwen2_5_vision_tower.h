#pragma once
// The vision tower and patch merger of Qwen2.5-VL (transformers 5.24's Qwen2_5_VisionTransformer
// PretrainedModel, the `visual.*` tensors of Qwen2_5_VLForConditionalGeneration as the published
// checkpoints store them, or `model.visual.*` as transformers' module tree names them):
//   patch embedding  a Conv3d without bias whose stride is its kernel (temporal_patch x patch x
//                    patch), i.e. one matmul over the processor's flattened patches; no learned
//                    position table;
//   windows          the patches regrouped by merge unit into windows of window_size pixels
//                    (window_size / spatial_merge_size / patch_size merge units a side, the last
//                    ones cut by the grid), as transformers' get_vision_window_index orders them;
//   blocks           x += proj(attn(RMS1(x))), x += down(silu(gate(RMS2(x))) * up(RMS2(x))), RMSNorm
//                    eps 1e-6 and every Linear with a bias; the attention bidirectional within each
//                    window, or within each frame in the blocks of fullatt_block_indexes, its q/k
//                    rotated by the 2-D axial rope of Qwen3.5's tower (head_dim/4 frequencies for
//                    the row, the same for the column, rotate_half over the whole head);
//   merger           RMSNorm (ln_q), each merge unit's rows concatenated, mlp.0, exact GELU, mlp.2
//                    to the language model's hidden size, the rows put back in the processor's order.
// Qwen2-VL's tower (Qwen2VisionTransformerPretrainedModel, the `qwen2` form) is the same without
// windows (every block attends within each frame) and with LayerNorm (weight and bias) for norm1 /
// norm2 / ln_q and a plain MLP fc2(act(fc1(x))) (QuickGELU, embed_dim x mlp_ratio wide); its
// vision_config names the tower's width embed_dim and the merger's output hidden_size.
// Linears run on the loader's kernels (16-bit dense weights, or a quantized tower's scheme); norms,
// rope and the softmax in float32. docs/VISION.md.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/image_encoder.h"
#include "model/layers/linear.h"

namespace fp4lm::model {

class ModelLoader;

// config.json's vision_config; every key read or refused by name.
struct Qwen2_5VisionConfig {
  bool qwen2 = false;  // Qwen2-VL's form (above): LayerNorm, fc1 / fc2, no windows
  int64_t depth = 32, hidden_size = 3584, intermediate_size = 3420, num_heads = 16, in_channels = 3;
  int64_t patch_size = 14, temporal_patch_size = 2, spatial_merge_size = 2, out_hidden_size = 3584;
  int64_t window_size = 112;
  int64_t tokens_per_second = 4;  // video positions only; still images do not use it
  std::vector<int64_t> fullatt_block_indexes = {7, 15, 23, 31};
  std::string hidden_act = "silu";  // or "gelu_pytorch_tanh", "gelu" (erf)
  double rope_theta = 10000.0;

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t patch_width() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
  // A window's side in merge units (transformers' vit_merger_window_size).
  int64_t window_units() const { return window_size / spatial_merge_size / patch_size; }
};
// `where` names the object in errors ("<dir>/config.json: vision_config"). `qwen2`: Qwen2-VL's keys
// (embed_dim, mlp_ratio, hidden_size as the merger's output; no window keys).
Qwen2_5VisionConfig parse_qwen2_5_vision_config(const nlohmann::json& j, const std::string& where, bool qwen2 = false);

// The windows of one frame of llm_h x llm_w merge units, `wu` units a side: the merge units in
// window order (row-major windows, row-major within each) and each window's unit count, empty
// windows left out (transformers' get_vision_window_index for one frame).
void qwen2_5_window_order(int64_t llm_h, int64_t llm_w, int64_t wu, std::vector<int64_t>& order,
                          std::vector<int64_t>& sizes);

class Qwen2_5VisionTower final : public ImageEncoder {
 public:
  struct Block {
    std::vector<float> norm1, norm2, norm1_b, norm2_b;  // the biases: Qwen2-VL's LayerNorm only
    std::unique_ptr<Linear> qkv, proj, gate, up, down;   // Qwen2-VL: fc1 as `up`, fc2 as `down`, no gate
  };
  struct Weights {
    std::unique_ptr<Linear> patch_embed;  // [hidden, patch_width], no bias
    std::vector<Block> blocks;
    std::vector<float> merger_norm, merger_norm_b;
    std::unique_ptr<Linear> merger_fc1, merger_fc2;
  };
  // Error naming the field when the config is inconsistent (heads not dividing hidden, a head_dim
  // not a multiple of 4, a window smaller than a merge unit, a full-attention block outside the tower).
  Qwen2_5VisionTower(Qwen2_5VisionConfig config, Weights weights, std::string where);

  // The checkpoint's tower (visual.* or model.visual.*): nullptr when config.json has no
  // vision_config or the checkpoint stores no tower; Error naming the file, field or tensor on any
  // defect (out_hidden_size other than the language model's hidden size, a missing or misshaped tensor).
  static std::unique_ptr<Qwen2_5VisionTower> load(ModelLoader& l, bool qwen2 = false);

  ImageFamily family() const override { return ImageFamily::qwen_vl; }
  using ImageEncoder::encode;
  ImageEmbeddings encode(const vision::QwenVlPixels& pixels) const override;
  // Several images in one pass (their Linears batched; each attends only to its own windows /
  // frames), in order.
  std::vector<ImageEmbeddings> encode_all(const std::vector<const vision::QwenVlPixels*>& images) const;
  int64_t hidden_size() const override { return config_.out_hidden_size; }
  const Qwen2_5VisionConfig& config() const { return config_; }

 private:
  void check(const vision::QwenVlPixels& p) const;

  Qwen2_5VisionConfig config_;
  Weights w_;
  std::string where_;
  std::vector<float> inv_freq_;  // head_dim / 4 rope frequencies
};

}  // namespace fp4lm::model
