#include "model/vision/gemma4_image_encoder.h"

#include "core/error.h"
#include "core/log.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

Gemma4ImageEncoder::Gemma4ImageEncoder(Gemma4VisionTower tower, Gemma4MmEmbedder embedder, int64_t hidden,
                                       std::string where)
    : tower_(std::move(tower)), embedder_(std::move(embedder)), hidden_(hidden), where_(std::move(where)) {}

std::unique_ptr<Gemma4ImageEncoder> Gemma4ImageEncoder::load(ModelLoader& l) {
  const nlohmann::json& cj = l.checkpoint().config();
  if (!cj.contains("vision_config") || cj["vision_config"].is_null()) return nullptr;
  const std::string where = l.checkpoint().dir() + "/config.json: vision_config";
  std::string root;
  for (const char* p : {"model.", ""})
    if (l.checkpoint().find(std::string(p) + "vision_tower.patch_embedder.input_proj.weight")) {
      root = p;
      break;
    }
  if (!l.checkpoint().find(root + "vision_tower.patch_embedder.input_proj.weight")) {
    log().info("{}: present, but the checkpoint stores no vision tower (no "
               "model.vision_tower.patch_embedder.input_proj.weight): the model runs text only and refuses image "
               "inputs",
               where);
    return nullptr;
  }
  Gemma4VisionConfig vc = parse_gemma4_vision_config(cj["vision_config"], where);
  Gemma4VisionTower t = Gemma4VisionTower::load(l, root + "vision_tower.", vc, where);
  Gemma4MmEmbedder e = Gemma4MmEmbedder::load(l, root + "embed_vision.", vc.hidden_size, l.config().hidden_size,
                                              vc.rms_norm_eps);
  return std::make_unique<Gemma4ImageEncoder>(std::move(t), std::move(e), l.config().hidden_size, where);
}

ImageEmbeddings Gemma4ImageEncoder::encode(const vision::Gemma4Pixels& px) const {
  const std::vector<float> soft = tower_.forward(px);
  ImageEmbeddings e;
  e.rows = px.soft_tokens;
  e.cols = hidden_;
  e.values = embedder_.forward(soft.data(), e.rows);
  return e;
}

}  // namespace fp4lm::model
