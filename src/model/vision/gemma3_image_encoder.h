#pragma once
// Gemma 3's image side as one model::ImageEncoder (transformers 5.24's
// Gemma3Model.get_image_features): the SigLIP tower (model/vision/siglip_vision_tower.h) over the
// image and each pan-and-scan crop, then the multi-modal projector
// (model/vision/gemma3_mm_projector.h): mm_tokens_per_image rows of the language model's hidden
// size per image or crop, in the processor's order (the image, then its crops).
#include <memory>

#include "model/image_encoder.h"
#include "model/vision/gemma3_mm_projector.h"
#include "model/vision/siglip_vision_tower.h"

namespace fp4lm::model {

class ModelLoader;

class Gemma3ImageEncoder final : public ImageEncoder {
 public:
  Gemma3ImageEncoder(SiglipVisionTower tower, Gemma3MmProjector projector, int64_t hidden, std::string where);

  // The checkpoint's tower and projector: nullptr when config.json has no vision_config or the
  // checkpoint stores no tower (a text-only extract: logged); Error naming the file, field or
  // tensor on any defect. Tensors under vision_tower.vision_model. (published checkpoints),
  // model.vision_tower.vision_model. or vision_tower. (transformers 5's save), and
  // multi_modal_projector. / model.multi_modal_projector..
  static std::unique_ptr<Gemma3ImageEncoder> load(ModelLoader& l);

  ImageFamily family() const override { return ImageFamily::gemma3; }
  using ImageEncoder::encode;
  ImageEmbeddings encode(const vision::Gemma3Pixels& pixels) const override;
  int64_t hidden_size() const override { return hidden_; }
  int64_t tokens_per_image() const { return projector_.tokens(); }
  const SiglipVisionConfig& vision_config() const { return tower_.config(); }

 private:
  SiglipVisionTower tower_;
  Gemma3MmProjector projector_;
  int64_t hidden_;
  std::string where_;
};

}  // namespace fp4lm::model
