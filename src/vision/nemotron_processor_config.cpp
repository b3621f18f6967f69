#include "vision/nemotron_processor_config.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "io/json_file.h"
#include "vision/processor_config_values.h"

namespace fp4lm::vision {

void apply_nemotron_processor_config(const nlohmann::json& j, const std::string& where, NemotronProcessorConfig& c) {
  if (!j.is_object()) fail("{}: expected a JSON object, found {}", where, j.type_name());
  static const std::set<std::string> kProcessorTypes = {"NemotronH_Omni_Reasoning_V3ImageProcessor"};
  // image_mean / image_std win over the legacy norm_mean / norm_std (the processor's setdefault).
  const bool has_mean = j.contains("image_mean") && !j["image_mean"].is_null();
  const bool has_std = j.contains("image_std") && !j["image_std"].is_null();
  for (const auto& [key, v] : j.items()) {
    if (key == "image_processor_type") {
      if (!v.is_string() || !kProcessorTypes.count(v.get<std::string>()))
        fail("{}: \"image_processor_type\" {} is not the Nemotron Omni image processor (expected "
             "NemotronH_Omni_Reasoning_V3ImageProcessor)",
             where, v.dump());
    } else if (key == "processor_class") {
      if (!v.is_string() || v.get<std::string>() != "NemotronH_Omni_Reasoning_V3Processor")
        fail("{}: \"processor_class\" {} is not NemotronH_Omni_Reasoning_V3Processor", where, v.dump());
    } else if (key == "image_processor") {
      apply_nemotron_processor_config(v, where + " (image_processor)", c);
    } else if (key == "video_processor" || key == "feature_extractor" || key == "audio_sampling_rate" ||
               key == "audio_subsampling_factor" || key == "audio_hop_length" || key == "video_temporal_patch_dim") {
      // processor_config.json's video and audio components: not the image processor's (video and
      // audio input are refused: docs/RUNTIME.md).
    } else if (key == "_downsample_factor") {
      // popped unread by the processor's __init__
    } else if (key == "patch_size") {
      c.patch_size = static_cast<int>(config_positive_int(v, where, key, 1024));
    } else if (key == "downsample_ratio") {
      c.downsample_ratio = config_finite_number(v, where, key);
      const double inv = 1.0 / c.downsample_ratio;
      if (!(c.downsample_ratio > 0) || std::fabs(inv - std::round(inv)) > 1e-9)
        fail("{}: \"downsample_ratio\" must be 1 / n for a whole n (the pixel shuffle's merge), found {}", where,
             v.dump());
    } else if (key == "min_num_patches") {
      c.min_num_patches = config_positive_int(v, where, key, int64_t{1} << 30);
    } else if (key == "max_num_patches") {
      if (!v.is_number_integer() || v.get<int64_t>() < 0)
        fail("{}: \"max_num_patches\" must be an integer >= 0 (0: no cap), found {}", where, v.dump());
      c.max_num_patches = v.get<int64_t>();
    } else if (key == "max_model_len") {
      c.max_model_len = config_positive_int(v, where, key, int64_t{1} << 30);
    } else if (key == "image_mean" || (key == "norm_mean" && !has_mean)) {
      if (!v.is_null()) c.image_mean = config_rgb_triple(v, where, key);
    } else if (key == "image_std" || (key == "norm_std" && !has_std)) {
      if (!v.is_null()) c.image_std = config_rgb_triple(v, where, key);
    } else if (key == "norm_mean" || key == "norm_std") {
      // shadowed by image_mean / image_std
    } else if (key == "rescale_factor") {
      c.rescale_factor = config_finite_number(v, where, key);
    } else if (key == "do_rescale") {
      c.do_rescale = config_bool(v, where, key);
    } else if (key == "do_normalize") {
      c.do_normalize = config_bool(v, where, key);
    } else if (key == "resample") {
      if (!v.is_null() && (!v.is_number_integer() || v.get<int>() != 3))
        fail("{}: \"resample\" {} is not supported; expected 3 (bicubic, the processor's filter)", where, v.dump());
    } else if (key == "do_resize") {
      if (!v.is_null() && !config_bool(v, where, key))
        fail("{}: \"do_resize\": false is not supported (the processor always resizes to its patch grid)", where);
    } else if (key == "do_convert_rgb") {
      if (!v.is_null() && !config_bool(v, where, key))
        fail("{}: \"do_convert_rgb\": false is not supported (fp4lm always converts images to RGB)", where);
    } else {
      fail("{}: unknown key \"{}\" for the Nemotron Omni image processor (fp4lm reads every key it accepts)", where,
           key);
    }
  }
  check_image_std(c.image_std, where);
}

NemotronProcessorConfig parse_nemotron_processor_config(const nlohmann::json& j, const std::string& where) {
  NemotronProcessorConfig c;
  apply_nemotron_processor_config(j, where, c);
  return c;
}

NemotronProcessorConfig read_nemotron_processor_config(const std::string& dir) {
  NemotronProcessorConfig c;
  const std::string pre = dir + "/preprocessor_config.json", proc = dir + "/processor_config.json";
  if (!std::filesystem::exists(pre) && !std::filesystem::exists(proc))
    fail("{}: neither preprocessor_config.json nor processor_config.json found", dir);
  if (std::filesystem::exists(pre)) apply_nemotron_processor_config(io::read_json_file(pre), pre, c);
  if (std::filesystem::exists(proc)) apply_nemotron_processor_config(io::read_json_file(proc), proc, c);
  return c;
}

}  // namespace fp4lm::vision
