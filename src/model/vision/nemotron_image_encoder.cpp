#include "model/vision/nemotron_image_encoder.h"

#include <cmath>

#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "model/config_reader.h"
#include "model/layer_plan.h"
#include "model/load/model_loader.h"
#include "model/vision/radio_remote_config.h"
#include "model/vision/vision_ops.h"

namespace fp4lm::model {

NemotronImageEncoder::NemotronImageEncoder(RadioVisionTower tower, Projector projector, int64_t merge, int64_t hidden)
    : tower_(std::move(tower)), p_(std::move(projector)), merge_(merge), hidden_(hidden) {}

bool NemotronImageEncoder::has_tower(const ModelLoader& l) {
  const nlohmann::json& cj = l.checkpoint().config();
  if (!cj.contains("vision_config") || !cj["vision_config"].is_object()) return false;
  if (l.config().architecture == "NemotronH_Omni_Reasoning_V3") return true;
  // The remote-code wrappers: the tower's shape comes from vision_config.args (as vLLM reads it).
  return cj["vision_config"].contains("args") &&
         l.checkpoint().find("vision_model.radio_model.model.patch_generator.embedder.weight") != nullptr;
}

std::unique_ptr<NemotronImageEncoder> NemotronImageEncoder::load(ModelLoader& l) {
  const nlohmann::json& cj = l.checkpoint().config();
  if (!cj.contains("vision_config") || cj["vision_config"].is_null()) return nullptr;
  const std::string file = l.checkpoint().dir() + "/config.json";
  const ConfigReader r{cj, file};
  // The remote-code checkpoints (NemotronH_Nano_VL_V2 / NemotronH_Nano_Omni_Reasoning_V3) describe
  // the tower by RADIO's training arguments (vision_config.args) and may tile (force_image_size:
  // vision/nemotron_tiling.h); transformers' class by its RadioConfig, dynamic resolution only.
  const bool remote = l.config().architecture != "NemotronH_Omni_Reasoning_V3";
  if (remote && !has_tower(l)) {
    // A language-model-only export, or a vision_config without RADIO's args (the tower's shape is
    // unknown): text input; an image is refused as for a model without a tower.
    if (l.checkpoint().find("vision_model.radio_model.model.patch_generator.embedder.weight"))
      log().warn("{}: vision_config has no 'args' object (RADIO's model name and sizes), so the vision tower is not "
                 "loaded; requests with images are refused",
                 file);
    return nullptr;
  }
  RadioVisionConfig vc = remote ? radio_config_from_remote(cj, file)
                                : parse_radio_vision_config(cj["vision_config"], file + ": vision_config");
  if (!remote && r.has("force_image_size"))
    fail("{}: field 'force_image_size' is {}; fp4lm runs the dynamic-resolution processor only (expected null)",
         file, cj["force_image_size"].dump());
  const double ratio = r.opt<double>("downsample_ratio", 0.5);
  const double inv = 1.0 / ratio;
  if (!(ratio > 0) || std::fabs(inv - std::round(inv)) > 1e-9)
    fail("{}: field 'downsample_ratio' must be 1 / n for a whole n (the pixel shuffle), found {}", file, ratio);
  const int64_t m = static_cast<int64_t>(std::lround(inv));
  const char* vh_key = r.has("vision_hidden_size") || !r.has("vit_hidden_size") ? "vision_hidden_size"
                                                                                  : "vit_hidden_size";
  const int64_t vh = r.opt<int64_t>(vh_key, 1280);
  if (vh != vc.hidden_size)
    fail("{}: field '{}' is {} but vision_config.hidden_size is {}", file, vh_key, vh, vc.hidden_size);
  const int64_t ph = r.opt<int64_t>("projector_hidden_size", 4096);
  r.positive("projector_hidden_size", ph);
  if (r.has("video_temporal_patch_size") && cj["vision_config"].contains("video_temporal_patch_size") &&
      cj["video_temporal_patch_size"] != cj["vision_config"]["video_temporal_patch_size"])
    fail("{}: video_temporal_patch_size {} disagrees with vision_config's {}", file,
         cj["video_temporal_patch_size"].dump(), cj["vision_config"]["video_temporal_patch_size"].dump());
  RadioVisionTower tower = RadioVisionTower::load(l, "vision_model.radio_model.model.", vc);
  Projector p;
  const int64_t in = vc.hidden_size * m * m, H = l.config().hidden_size;
  if (l.config().mamba.mtp_layers > 0) {
    p.final_ln_w = l.tensor_f32("vision_projector.vision_final_layernorm.weight", {vc.hidden_size});
    p.final_ln_b = l.tensor_f32("vision_projector.vision_final_layernorm.bias", {vc.hidden_size});
  }
  p.norm = l.tensor_f32("mlp1.0.weight", {in});
  for (const char* b : {"mlp1.0.bias", "mlp1.1.bias", "mlp1.3.bias"})
    if (l.checkpoint().find(b))
      fail("{}: tensor {} is present, but the Nemotron projector (transformers' "
           "NemotronH_Omni_Reasoning_V3MultiModalProjector) has no biases",
           l.checkpoint().dir(), b);
  p.fc1 = l.load_extra_linear(plan_linear("mlp1.1", -1, {"mlp1.1"}, {ph}, in, false));
  p.fc2 = l.load_extra_linear(plan_linear("mlp1.3", -1, {"mlp1.3"}, {H}, ph, false));
  return std::make_unique<NemotronImageEncoder>(std::move(tower), std::move(p), m, H);
}

ImageEmbeddings NemotronImageEncoder::encode(const vision::NemotronPixels& px) const {
  const RadioVisionConfig& vc = tower_.config();
  const int64_t gh = px.grid.h, gw = px.grid.w;
  if (px.tiles < 1 || px.cols != vc.patch_dim() || px.rows != px.tiles * gh * gw ||
      px.pixel_values.size() != static_cast<size_t>(px.rows * px.cols))
    fail("Nemotron vision tower: {} patches of {} values for {} tile(s) of a {} x {} grid; the tower takes patches of "
         "{} values",
         px.rows, px.cols, px.tiles, gh, gw, vc.patch_dim());
  if (gh % merge_ != 0 || gw % merge_ != 0)
    fail("Nemotron vision tower: the {} x {} patch grid is not a multiple of the pixel shuffle's {}", gh, gw, merge_);
  // Tiles (the remote-code checkpoints' fixed-size tiling) are separate images for the tower, their
  // tokens one after another.
  ImageEmbeddings e;
  e.cols = hidden_;
  for (int64_t t = 0; t < px.tiles; ++t) {
    const std::vector<float> rows = encode_tile(px.pixel_values.data() + t * gh * gw * px.cols, gh, gw);
    e.values.insert(e.values.end(), rows.begin(), rows.end());
    e.rows += gh * gw / (merge_ * merge_);
  }
  return e;
}

std::vector<float> NemotronImageEncoder::encode_tile(const float* patches, int64_t gh, int64_t gw) const {
  const RadioVisionConfig& vc = tower_.config();
  const int64_t C = vc.hidden_size, m = merge_;
  ThreadPool& pool = ThreadPool::global();
  std::vector<float> f = tower_.forward(patches, gh, gw);
  if (!p_.final_ln_w.empty()) {
    std::vector<float> y(f.size());
    vision_layer_norm(f.data(), gh * gw, C, p_.final_ln_w, p_.final_ln_b, static_cast<float>(vc.layer_norm_eps),
                      y.data(), pool);
    f = std::move(y);
  }
  // Pixel shuffle: token (i, j) is the m x m block at rows m*i.., columns m*j.., row by row.
  const int64_t rows = gh * gw / (m * m), in = C * m * m;
  std::vector<float> s(static_cast<size_t>(rows * in));
  for (int64_t i = 0; i < gh / m; ++i)
    for (int64_t j = 0; j < gw / m; ++j) {
      float* dst = s.data() + (i * (gw / m) + j) * in;
      for (int64_t di = 0; di < m; ++di)
        for (int64_t dj = 0; dj < m; ++dj)
          std::copy_n(f.data() + ((m * i + di) * gw + m * j + dj) * C, C, dst + (di * m + dj) * C);
    }
  // RMSNorm in float32: weight * (x * rsqrt(mean(x^2) + 1e-5)).
  for (int64_t r = 0; r < rows; ++r) {
    float* x = s.data() + r * in;
    double ss = 0;
    for (int64_t i = 0; i < in; ++i) ss += static_cast<double>(x[i]) * x[i];
    const float inv = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(in)) + 1e-5f);
    for (int64_t i = 0; i < in; ++i) x[i] = p_.norm[static_cast<size_t>(i)] * (x[i] * inv);
  }
  const int64_t ph = p_.fc1->out_features();
  std::vector<float> h(static_cast<size_t>(rows * ph));
  p_.fc1->forward(s.data(), rows, h.data(), pool);
  for (float& v : h) v = v > 0 ? v * v : 0.0f;  // relu^2
  std::vector<float> out(static_cast<size_t>(rows * hidden_));
  p_.fc2->forward(h.data(), rows, out.data(), pool);
  return out;
}

}  // namespace fp4lm::model
