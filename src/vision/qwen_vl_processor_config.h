#pragma once
// A Qwen2-VL-family image processor's settings (transformers' Qwen2VLImageProcessor, which
// Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5 and Qwen3.6 checkpoints name in preprocessor_config.json).
// Every key of the file is read or refused: an unknown key, or a value fp4lm does not implement
// (another resample filter, do_convert_rgb false), is an Error naming the file and the key.
#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace fp4lm::vision {

struct QwenVlProcessorConfig {
  int64_t min_pixels = 56 * 56;         // size.shortest_edge (or min_pixels)
  int64_t max_pixels = 28 * 28 * 1280;  // size.longest_edge (or max_pixels)
  int patch_size = 14;
  int temporal_patch_size = 2;
  int merge_size = 2;
  std::array<float, 3> image_mean{0.48145466f, 0.4578275f, 0.40821073f};  // OPENAI_CLIP_MEAN
  std::array<float, 3> image_std{0.26862954f, 0.26130258f, 0.27577711f};   // OPENAI_CLIP_STD
  double rescale_factor = 1.0 / 255.0;
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = true;
};

// From the JSON object of preprocessor_config.json; `where` names it in errors.
QwenVlProcessorConfig parse_qwen_vl_processor_config(const nlohmann::json& j, const std::string& where);
// The file itself.
QwenVlProcessorConfig read_qwen_vl_processor_config(const std::string& path);

}  // namespace fp4lm::vision
