#pragma once
// A Gemma 3 image processor's settings (transformers' Gemma3ImageProcessor, a SigLIP resize to a
// fixed size with optional pan-and-scan crops), from preprocessor_config.json and the processor's
// own keys of processor_config.json. Every key is read or refused: an unknown key, or a value fp4lm
// does not implement (another resample filter, do_convert_rgb false), is an Error naming the file
// and the key. A null pan-and-scan key takes Gemma3Processor's default (off; 256, 4, 1.2), as the
// checkpoints' files leave them null for the processor to fill in.
#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "vision/pillow_resize.h"

namespace fp4lm::vision {

struct Gemma3ProcessorConfig {
  int height = 224, width = 224;  // size.height, size.width: every image and crop is resized to it
  PillowFilter resample = PillowFilter::kBilinear;
  std::array<float, 3> image_mean{0.5f, 0.5f, 0.5f};  // IMAGENET_STANDARD_MEAN
  std::array<float, 3> image_std{0.5f, 0.5f, 0.5f};   // IMAGENET_STANDARD_STD
  double rescale_factor = 1.0 / 255.0;
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = true;
  bool do_pan_and_scan = false;
  int64_t pan_and_scan_min_crop_size = 256;
  int64_t pan_and_scan_max_num_crops = 4;
  double pan_and_scan_min_ratio_to_activate = 1.2;
  int64_t image_seq_length = 256;  // image tokens per image or crop (processor_config.json)
};

// Applies the keys of one JSON object (preprocessor_config.json, or processor_config.json with
// the processor's keys and optionally a nested "image_processor" object) onto `c`; `where` names
// the file in errors.
void apply_gemma3_processor_config(const nlohmann::json& j, const std::string& where, Gemma3ProcessorConfig& c);
Gemma3ProcessorConfig parse_gemma3_processor_config(const nlohmann::json& j, const std::string& where);
// From a checkpoint directory: preprocessor_config.json, then processor_config.json if present.
Gemma3ProcessorConfig read_gemma3_processor_config(const std::string& dir);

}  // namespace fp4lm::vision
