#pragma once
// Gemma 4's image side as one model::ImageEncoder (transformers 5.24's
// Gemma4Model.get_image_features): the vision tower (model/vision/gemma4_vision_tower.h) over the
// processor's patches, then the multimodal embedder (model/vision/gemma4_mm_embedder.h): one row of
// the language model's hidden size per soft token, the image's num_soft_tokens rows in order.
#include <memory>
#include <string>

#include "model/image_encoder.h"
#include "model/vision/gemma4_mm_embedder.h"
#include "model/vision/gemma4_vision_tower.h"

namespace fp4lm::model {

class ModelLoader;

class Gemma4ImageEncoder final : public ImageEncoder {
 public:
  Gemma4ImageEncoder(Gemma4VisionTower tower, Gemma4MmEmbedder embedder, int64_t hidden, std::string where);

  // The checkpoint's tower and embedder: nullptr when config.json has no vision_config or the
  // checkpoint stores no tower (a text-only extract: logged); Error naming the file, field or
  // tensor on any defect. Tensors under model.vision_tower. and model.embed_vision. (what
  // transformers 5.24 writes and the published checkpoints hold), or the same without "model.".
  static std::unique_ptr<Gemma4ImageEncoder> load(ModelLoader& l);

  ImageFamily family() const override { return ImageFamily::gemma4; }
  using ImageEncoder::encode;
  ImageEmbeddings encode(const vision::Gemma4Pixels& pixels) const override;
  int64_t hidden_size() const override { return hidden_; }
  const Gemma4VisionConfig& vision_config() const { return tower_.config(); }

 private:
  Gemma4VisionTower tower_;
  Gemma4MmEmbedder embedder_;
  int64_t hidden_;
  std::string where_;
};

}  // namespace fp4lm::model
