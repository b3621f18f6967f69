#include "model/vision/gemma3_image_encoder.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

Gemma3ImageEncoder::Gemma3ImageEncoder(SiglipVisionTower tower, Gemma3MmProjector projector, int64_t hidden,
                                       std::string where)
    : tower_(std::move(tower)), projector_(std::move(projector)), hidden_(hidden), where_(std::move(where)) {}

std::unique_ptr<Gemma3ImageEncoder> Gemma3ImageEncoder::load(ModelLoader& l) {
  const nlohmann::json& cj = l.checkpoint().config();
  if (!cj.contains("vision_config") || cj["vision_config"].is_null()) return nullptr;
  const std::string file = l.checkpoint().dir() + "/config.json";
  const std::string where = file + ": vision_config";
  std::string tower;
  for (const char* p : {"vision_tower.vision_model.", "model.vision_tower.vision_model.", "model.vision_tower.",
                        "vision_tower."})
    if (l.checkpoint().find(std::string(p) + "embeddings.patch_embedding.weight")) {
      tower = p;
      break;
    }
  if (tower.empty()) {
    log().info("{}: present, but the checkpoint stores no vision tower (no "
               "vision_tower.vision_model.embeddings.patch_embedding.weight): the model runs text only and refuses "
               "image inputs",
               where);
    return nullptr;
  }
  std::string proj = "multi_modal_projector.";
  if (!l.checkpoint().find(proj + "mm_input_projection_weight") &&
      l.checkpoint().find("model.multi_modal_projector.mm_input_projection_weight"))
    proj = "model.multi_modal_projector.";
  SiglipVisionConfig vc = parse_siglip_vision_config(cj["vision_config"], where);
  int64_t tokens = 256;  // Gemma3Config's default
  if (cj.contains("mm_tokens_per_image") && !cj["mm_tokens_per_image"].is_null()) {
    if (!cj["mm_tokens_per_image"].is_number_integer())
      fail("{}: field 'mm_tokens_per_image' must be an integer, found {}", file, cj["mm_tokens_per_image"].dump());
    tokens = cj["mm_tokens_per_image"].get<int64_t>();
  }
  SiglipVisionTower t = SiglipVisionTower::load(l, tower, vc, where);
  Gemma3MmProjector pr = Gemma3MmProjector::load(l, proj, vc.grid(), tokens, vc.hidden_size, l.config().hidden_size,
                                                 vc.layer_norm_eps, file);
  return std::make_unique<Gemma3ImageEncoder>(std::move(t), std::move(pr), l.config().hidden_size, where);
}

ImageEmbeddings Gemma3ImageEncoder::encode(const vision::Gemma3Pixels& px) const {
  const SiglipVisionConfig& c = tower_.config();
  if (px.height != c.image_size || px.width != c.image_size)
    fail("pixel_values: images of {}x{} pixels, but the vision tower ({}) takes image_size {}x{} (the processor's "
         "size must equal the tower's image_size)",
         px.width, px.height, where_, c.image_size, c.image_size);
  if (px.images <= 0 || px.images != 1 + px.num_crops)
    fail("pixel_values: {} images for 1 image and {} crops", px.images, px.num_crops);
  const auto want = static_cast<size_t>(px.images * c.num_channels * c.image_size * c.image_size);
  if (px.pixel_values.size() != want)
    fail("pixel_values: {} values, but {} images x {} channels x {} x {} is {}", px.pixel_values.size(), px.images,
         c.num_channels, c.image_size, c.image_size, want);
  const std::vector<float> hidden = tower_.forward(px.pixel_values.data(), px.images);
  ImageEmbeddings e;
  e.values = projector_.forward(hidden.data(), px.images);
  e.rows = px.images * projector_.tokens();
  e.cols = hidden_;
  return e;
}

}  // namespace fp4lm::model
