#pragma once
// The Nemotron VL / Omni image processor's settings (transformers 5.24's
// NemotronH_Omni_Reasoning_V3ImageProcessor: dynamic resolution, each image resized to a patch
// grid near its own within a patch budget), from preprocessor_config.json or the "image_processor"
// object of processor_config.json. Every key is read or refused by name; NVIDIA's norm_mean /
// norm_std are read as image_mean / image_std (as the processor does when those are absent).
#include <array>
#include <cmath>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace fp4lm::vision {

struct NemotronProcessorConfig {
  int patch_size = 16;
  double downsample_ratio = 0.5;  // the model's pixel shuffle: merge_size = round(1 / ratio) per side
  int64_t min_num_patches = 1024;
  int64_t max_num_patches = 13312;  // 0: no cap
  int64_t max_model_len = 16384;    // caps the patch budget of the images of one call
  std::array<float, 3> image_mean{0.48145466f, 0.4578275f, 0.40821073f};  // OPENAI_CLIP_MEAN
  std::array<float, 3> image_std{0.26862954f, 0.26130258f, 0.27577711f};  // OPENAI_CLIP_STD
  double rescale_factor = 1.0 / 255.0;
  bool do_rescale = true;
  bool do_normalize = true;
  // The remote-code checkpoints (NemotronH_Nano_VL_V2, NemotronH_Nano_Omni_Reasoning_V3: settings
  // from config.json, vision/nemotron_remote_config.h) as vLLM's nano_nemotron_vl.py runs them:
  int64_t tile_size = 0;        // force_image_size when the checkpoint tiles (vision/nemotron_tiling.h); 0: dynamic
  int64_t max_num_tiles = 12;   // tiles per image, the thumbnail not counted
  bool use_thumbnail = true;    // a whole-image tile after the others when there are several
  bool uint8_resize = false;    // torch's uint8 antialiased bicubic, then x / 255 (not the float32 resize)

  int64_t merge_size() const { return static_cast<int64_t>(std::lround(1.0 / downsample_ratio)); }
};

void apply_nemotron_processor_config(const nlohmann::json& j, const std::string& where, NemotronProcessorConfig& c);
NemotronProcessorConfig parse_nemotron_processor_config(const nlohmann::json& j, const std::string& where);
// From a checkpoint directory: preprocessor_config.json, then processor_config.json if present.
NemotronProcessorConfig read_nemotron_processor_config(const std::string& dir);

}  // namespace fp4lm::vision
