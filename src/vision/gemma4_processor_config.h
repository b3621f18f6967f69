#pragma once
// A Gemma 4 image processor's settings (transformers' Gemma4ImageProcessor: an aspect-preserving
// resize into a budget of max_soft_tokens * pooling_kernel_size^2 patches), from
// preprocessor_config.json or the "image_processor" object of processor_config.json. Every key
// is read or refused, as for the other processors; "size" is accepted only as null, since the
// processor does not use it (its resize is driven by the patch budget).
#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "vision/pillow_resize.h"

namespace fp4lm::vision {

struct Gemma4ProcessorConfig {
  int patch_size = 16;
  int64_t max_soft_tokens = 280;  // one of 70, 140, 280, 560, 1120
  int pooling_kernel_size = 3;
  PillowFilter resample = PillowFilter::kBicubic;
  std::array<float, 3> image_mean{0.0f, 0.0f, 0.0f};
  std::array<float, 3> image_std{1.0f, 1.0f, 1.0f};
  double rescale_factor = 1.0 / 255.0;
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = false;  // Gemma 4 was trained on pixels in [0, 1]
  int64_t image_seq_length = 280;  // the processor's placeholder count (processor_config.json)

  int64_t max_patches() const { return max_soft_tokens * pooling_kernel_size * pooling_kernel_size; }
};

void apply_gemma4_processor_config(const nlohmann::json& j, const std::string& where, Gemma4ProcessorConfig& c);
Gemma4ProcessorConfig parse_gemma4_processor_config(const nlohmann::json& j, const std::string& where);
// From a checkpoint directory: preprocessor_config.json, then processor_config.json if present.
Gemma4ProcessorConfig read_gemma4_processor_config(const std::string& dir);

}  // namespace fp4lm::vision
