#include "vision/gemma4_processor_config.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "io/json_file.h"
#include "vision/processor_config_values.h"

namespace fp4lm::vision {
void apply_gemma4_processor_config(const nlohmann::json& j, const std::string& where, Gemma4ProcessorConfig& c) {
  if (!j.is_object()) fail("{}: expected a JSON object, found {}", where, j.type_name());
  static const std::set<std::string> kProcessorTypes = {"Gemma4ImageProcessor", "Gemma4ImageProcessorFast",
                                                        "Gemma4ImageProcessorPil"};
  for (const auto& [key, v] : j.items()) {
    if (key == "image_processor_type") {
      if (!v.is_string() || !kProcessorTypes.count(v.get<std::string>()))
        fail("{}: \"image_processor_type\" {} is not a Gemma 4 image processor (expected one of "
             "Gemma4ImageProcessor, Gemma4ImageProcessorFast, Gemma4ImageProcessorPil)",
             where, v.dump());
    } else if (key == "processor_class") {
      if (!v.is_string() || v.get<std::string>() != "Gemma4Processor")
        fail("{}: \"processor_class\" {} is not Gemma4Processor", where, v.dump());
    } else if (key == "image_processor") {
      apply_gemma4_processor_config(v, where + " (image_processor)", c);
    } else if (key == "feature_extractor" || key == "video_processor" || key == "audio_seq_length" ||
               key == "audio_ms_per_token") {
      // processor_config.json's audio and video components: theirs to read, not the image
      // processor's (docs/VISION.md: audio and video for Gemma 4 are not built).
    } else if (key == "image_seq_length") {
      c.image_seq_length = config_positive_int(v, where, key, 1 << 20);
    } else if (key == "size") {
      if (!v.is_null())
        fail("{}: \"size\" {} is not used by Gemma 4's processor (its resize follows max_soft_tokens); expected "
             "null or no key",
             where, v.dump());
    } else if (key == "patch_size") {
      c.patch_size = static_cast<int>(config_positive_int(v, where, key, 1024));
    } else if (key == "pooling_kernel_size") {
      c.pooling_kernel_size = static_cast<int>(config_positive_int(v, where, key, 64));
    } else if (key == "max_soft_tokens") {
      c.max_soft_tokens = config_positive_int(v, where, key, 1 << 20);
      if (c.max_soft_tokens != 70 && c.max_soft_tokens != 140 && c.max_soft_tokens != 280 &&
          c.max_soft_tokens != 560 && c.max_soft_tokens != 1120)
        fail("{}: \"max_soft_tokens\" must be one of 70, 140, 280, 560, 1120 (as the processor), found {}", where,
             v.dump());
    } else if (key == "resample") {
      if (!v.is_number_integer() || (v.get<int>() != 2 && v.get<int>() != 3))
        fail("{}: \"resample\" {} is not supported; expected 3 (bicubic, Gemma 4's filter) or 2 (bilinear)", where,
             v.dump());
      c.resample = static_cast<PillowFilter>(v.get<int>());
    } else if (key == "image_mean") {
      c.image_mean = config_rgb_triple(v, where, key);
    } else if (key == "image_std") {
      c.image_std = config_rgb_triple(v, where, key);
    } else if (key == "rescale_factor") {
      if (!v.is_number() || !std::isfinite(v.get<double>()))
        fail("{}: \"rescale_factor\" must be a finite number, found {}", where, v.dump());
      c.rescale_factor = v.get<double>();
    } else if (key == "do_resize") {
      c.do_resize = config_bool(v, where, key);
    } else if (key == "do_rescale") {
      c.do_rescale = config_bool(v, where, key);
    } else if (key == "do_normalize") {
      c.do_normalize = config_bool(v, where, key);
    } else if (key == "do_convert_rgb") {
      if (!v.is_null() && !config_bool(v, where, key))
        fail("{}: \"do_convert_rgb\": false is not supported (fp4lm always converts images to RGB)", where);
    } else {
      fail("{}: unknown key \"{}\" for a Gemma 4 image processor (fp4lm reads every key it accepts)", where, key);
    }
  }
  check_image_std(c.image_std, where);
}

Gemma4ProcessorConfig parse_gemma4_processor_config(const nlohmann::json& j, const std::string& where) {
  Gemma4ProcessorConfig c;
  apply_gemma4_processor_config(j, where, c);
  return c;
}

Gemma4ProcessorConfig read_gemma4_processor_config(const std::string& dir) {
  Gemma4ProcessorConfig c;
  const std::string pre = dir + "/preprocessor_config.json", proc = dir + "/processor_config.json";
  if (!std::filesystem::exists(pre) && !std::filesystem::exists(proc))
    fail("{}: neither preprocessor_config.json nor processor_config.json found", dir);
  if (std::filesystem::exists(pre)) apply_gemma4_processor_config(io::read_json_file(pre), pre, c);
  if (std::filesystem::exists(proc)) apply_gemma4_processor_config(io::read_json_file(proc), proc, c);
  return c;
}

}  // namespace fp4lm::vision
