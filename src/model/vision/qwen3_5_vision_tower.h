#pragma once
// The vision tower and projector of Qwen3.5 / Qwen3.6 (transformers 5.24's Qwen3_5VisionModel, the
// `model.visual.*` tensors of Qwen3_5ForConditionalGeneration and Qwen3_5MoeForConditionalGeneration):
//   patch embedding  a Conv3d whose stride is its kernel (temporal_patch x patch x patch), i.e. one
//                    matmul over the processor's flattened patches, plus bias;
//   + positions      the learned square grid of num_position_embeddings rows, resampled to the
//                    image's patch grid bilinearly with align_corners (as transformers' gather of 4 taps);
//   blocks           x += proj(attn(LN1(x))), x += fc2(act(fc1(LN2(x)))), LayerNorm eps 1e-6; the
//                    attention is bidirectional within each frame's own patches (cu_seqlens), its q/k
//                    rotated by the 2-D axial rope (head_dim/4 frequencies for the row, the same for
//                    the column, the pair repeated: rotate_half over the whole head);
//   merger           LN, then each 2x2 merge window's rows concatenated, fc1, exact GELU, fc2 to the
//                    language model's hidden size.
// Qwen3-VL's tower (Qwen3VLVisionModel, Qwen3VLMoeVisionModel) is the same plus DeepStack: after the
// blocks listed in deepstack_visual_indexes, `deepstack_merger_list.<j>` (j the block's place in that
// list) turns the hidden state into one more set of rows — its LayerNorm over the concatenated
// merge window ("postshuffle"), then fc1, GELU, fc2 — returned as ImageEmbeddings::deepstack in
// block order, which the language model adds after its first decoder layers.
// Linears run on the loader's kernels (16-bit dense weights, or a quantized tower's scheme);
// LayerNorm, rope and the softmax in float32. docs/VISION.md.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "model/image_encoder.h"
#include "model/layers/linear.h"

namespace fp4lm::model {

class ModelLoader;

// config.json's vision_config; every key read or refused by name.
struct Qwen3_5VisionConfig {
  int64_t depth = 27, hidden_size = 1152, intermediate_size = 4304, num_heads = 16, in_channels = 3;
  int64_t patch_size = 16, temporal_patch_size = 2, spatial_merge_size = 2;
  int64_t out_hidden_size = 3584, num_position_embeddings = 2304;
  std::string hidden_act = "gelu_pytorch_tanh";  // or "gelu" (erf), "silu"
  double rope_theta = 10000.0;
  std::vector<int64_t> deepstack_visual_indexes;  // Qwen3-VL; empty for Qwen3.5

  int64_t head_dim() const { return hidden_size / num_heads; }
  int64_t patch_width() const { return in_channels * temporal_patch_size * patch_size * patch_size; }
};
// `where` names the object in errors ("<dir>/config.json: vision_config"). `deepstack`: Qwen3-VL's
// form, whose deepstack_visual_indexes (distinct blocks of the tower) are read; Qwen3.5's refuses any.
Qwen3_5VisionConfig parse_qwen3_5_vision_config(const nlohmann::json& j, const std::string& where,
                                                bool deepstack = false);

class Qwen3_5VisionTower final : public ImageEncoder {
 public:
  struct Block {
    std::vector<float> norm1_w, norm1_b, norm2_w, norm2_b;
    std::unique_ptr<Linear> qkv, proj, fc1, fc2;
  };
  struct Weights {
    std::unique_ptr<Linear> patch_embed;  // [hidden, patch_width] + bias
    std::vector<float> pos_embed;         // [num_position_embeddings, hidden]
    std::vector<Block> blocks;
    std::vector<float> merger_norm_w, merger_norm_b;
    std::unique_ptr<Linear> merger_fc1, merger_fc2;
    // DeepStack mergers, one per deepstack_visual_indexes entry in its order; LayerNorm over
    // hidden x merge^2.
    struct DeepstackMerger {
      std::vector<float> norm_w, norm_b;
      std::unique_ptr<Linear> fc1, fc2;
    };
    std::vector<DeepstackMerger> deepstack;
  };
  // Error naming the field when the config is inconsistent (heads not dividing hidden, a head_dim
  // not a multiple of 4, a non-square position grid).
  Qwen3_5VisionTower(Qwen3_5VisionConfig config, Weights weights, std::string where);

  // The checkpoint's tower: nullptr when config.json has no vision_config (a text-only checkpoint);
  // Error naming the file, field or tensor on any defect (out_hidden_size other than the language
  // model's hidden size, a missing or misshaped model.visual.* tensor).
  // `deepstack`: Qwen3-VL's tower (deepstack_visual_indexes and model.visual.deepstack_merger_list.*).
  static std::unique_ptr<Qwen3_5VisionTower> load(ModelLoader& l, bool deepstack = false);

  ImageFamily family() const override { return ImageFamily::qwen_vl; }
  using ImageEncoder::encode;
  ImageEmbeddings encode(const vision::QwenVlPixels& pixels) const override;
  // Several images in one pass (their Linears batched; each attends only to its own patches), in order.
  std::vector<ImageEmbeddings> encode_all(const std::vector<const vision::QwenVlPixels*>& images) const;
  int64_t hidden_size() const override { return config_.out_hidden_size; }
  int64_t deepstack_levels() const override { return static_cast<int64_t>(config_.deepstack_visual_indexes.size()); }
  const Qwen3_5VisionConfig& config() const { return config_; }

  // The multiply-adds x2 of one image of `patches` patches in one frame (the bench's GFLOP count):
  // the Linears, plus the attention's two products.
  double flops(int64_t patches) const;

 private:
  void check(const vision::QwenVlPixels& p) const;

  Qwen3_5VisionConfig config_;
  Weights w_;
  std::string where_;
  std::vector<float> inv_freq_;  // head_dim / 4 rope frequencies
};

// A dense Linear over weights already in memory ([n, k] of F32 / BF16 / F16, `keepalive` holding
// them): the patch embedding's Conv3d as a matmul, and benchmarks' synthetic towers. The oracle
// picks the backend, as for a loaded layer (`forced`: a backend name to prefer, as
// --linear-backend; benchmarks use it for same-run baselines).
std::unique_ptr<Linear> dense_linear(const std::string& name, const void* weight, DType weight_dtype, int64_t n,
                                     int64_t k, std::vector<float> bias, DType act_dtype,
                                     std::shared_ptr<const void> keepalive, const std::string& forced = "");

}  // namespace fp4lm::model
