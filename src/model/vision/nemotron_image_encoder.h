#pragma once
// Nemotron VL / Omni's image side as one model::ImageEncoder (transformers 5.24's
// NemotronH_Omni_Reasoning_V3.get_image_features): the RADIO tower (model/vision/radio_vision_tower.h)
// over the processor's patches; with MTP layers in the language model, Megatron's final LayerNorm
// (vision_projector.vision_final_layernorm); the pixel shuffle (downsample_ratio 1/m: each m x m
// block of patch features, row by row, concatenated into one row); the projector mlp1 = RMSNorm
// (eps 1e-5, float32) -> Linear (no bias) -> relu^2 -> Linear (no bias). One row of the language
// model's hidden size per image token, grid_h * grid_w / m^2 rows in row-major order.
#include <memory>
#include <optional>
#include <string>

#include "model/image_encoder.h"
#include "model/vision/radio_vision_tower.h"

namespace fp4lm::model {

class ModelLoader;

class NemotronImageEncoder final : public ImageEncoder {
 public:
  struct Projector {
    std::vector<float> final_ln_w, final_ln_b;  // empty without MTP layers
    std::vector<float> norm;                    // mlp1.0: RMSNorm [m^2 * vision hidden]
    std::unique_ptr<Linear> fc1, fc2;           // mlp1.1, mlp1.3
  };
  NemotronImageEncoder(RadioVisionTower tower, Projector projector, int64_t merge, int64_t hidden);

  // The checkpoint's tower and projector (config.json's vision_config, downsample_ratio,
  // projector_hidden_size, vision_hidden_size; tensors vision_model.radio_model.model.*, mlp1.*):
  // Error naming the file, field or tensor on any defect; nullptr without a vision_config.
  static std::unique_ptr<NemotronImageEncoder> load(ModelLoader& l);
  // The tower loads: transformers' class with a vision_config; the remote-code wrappers with
  // vision_config.args and the tower's patch embedder (without them they run text, and an image is
  // refused as for a model without a tower).
  static bool has_tower(const ModelLoader& l);

  ImageFamily family() const override { return ImageFamily::nemotron; }
  using ImageEncoder::encode;
  ImageEmbeddings encode(const vision::NemotronPixels& pixels) const override;
  int64_t hidden_size() const override { return hidden_; }
  int64_t merge_size() const { return merge_; }
  const RadioVisionTower& tower() const { return tower_; }

 private:
  // One tile (or the whole image): grid_h * grid_w patches -> grid_h * grid_w / m^2 rows.
  std::vector<float> encode_tile(const float* patches, int64_t grid_h, int64_t grid_w) const;

  RadioVisionTower tower_;
  Projector p_;
  int64_t merge_, hidden_;
};

}  // namespace fp4lm::model
