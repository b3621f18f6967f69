#include "vision/gemma3_processor_config.h"

#include <cmath>
#include <filesystem>
#include <set>

#include "core/error.h"
#include "io/json_file.h"
#include "vision/processor_config_values.h"

namespace fp4lm::vision {
void apply_gemma3_processor_config(const nlohmann::json& j, const std::string& where, Gemma3ProcessorConfig& c) {
  if (!j.is_object()) fail("{}: expected a JSON object, found {}", where, j.type_name());
  static const std::set<std::string> kProcessorTypes = {"Gemma3ImageProcessor", "Gemma3ImageProcessorFast",
                                                        "Gemma3ImageProcessorPil"};
  for (const auto& [key, v] : j.items()) {
    if (key == "image_processor_type") {
      if (!v.is_string() || !kProcessorTypes.count(v.get<std::string>()))
        fail("{}: \"image_processor_type\" {} is not a Gemma 3 image processor (expected one of "
             "Gemma3ImageProcessor, Gemma3ImageProcessorFast, Gemma3ImageProcessorPil)",
             where, v.dump());
    } else if (key == "processor_class") {
      if (!v.is_string() || v.get<std::string>() != "Gemma3Processor")
        fail("{}: \"processor_class\" {} is not Gemma3Processor", where, v.dump());
    } else if (key == "image_processor") {
      // processor_config.json as transformers 5 writes it: the image processor's keys nested.
      apply_gemma3_processor_config(v, where + " (image_processor)", c);
    } else if (key == "image_seq_length") {
      c.image_seq_length = config_positive_int(v, where, key, 1 << 20);
    } else if (key == "size") {
      if (!v.is_object()) fail("{}: \"size\" must be an object, found {}", where, v.dump());
      for (const auto& [sk, sv] : v.items()) {
        if (sk == "height") c.height = static_cast<int>(config_positive_int(sv, where, "size.height", 16384));
        else if (sk == "width") c.width = static_cast<int>(config_positive_int(sv, where, "size.width", 16384));
        else fail("{}: \"size.{}\" is not a Gemma 3 size key (expected height and width)", where, sk);
      }
      if (!v.contains("height") || !v.contains("width"))
        fail("{}: \"size\" must have both height and width, found {}", where, v.dump());
    } else if (key == "resample") {
      if (!v.is_number_integer() || (v.get<int>() != 2 && v.get<int>() != 3))
        fail("{}: \"resample\" {} is not supported; expected 2 (bilinear, Gemma 3's filter) or 3 (bicubic)", where,
             v.dump());
      c.resample = static_cast<PillowFilter>(v.get<int>());
    } else if (key == "image_mean") {
      c.image_mean = config_rgb_triple(v, where, key);
    } else if (key == "image_std") {
      c.image_std = config_rgb_triple(v, where, key);
    } else if (key == "rescale_factor") {
      c.rescale_factor = config_finite_number(v, where, key);
    } else if (key == "do_resize") {
      c.do_resize = config_bool(v, where, key);
    } else if (key == "do_rescale") {
      c.do_rescale = config_bool(v, where, key);
    } else if (key == "do_normalize") {
      c.do_normalize = config_bool(v, where, key);
    } else if (key == "do_convert_rgb") {
      // null: Gemma3Processor's default, true.
      if (!v.is_null() && !config_bool(v, where, key))
        fail("{}: \"do_convert_rgb\": false is not supported (fp4lm always converts images to RGB)", where);
    } else if (key == "do_pan_and_scan") {
      c.do_pan_and_scan = v.is_null() ? false : config_bool(v, where, key);
    } else if (key == "pan_and_scan_min_crop_size") {
      if (!v.is_null()) c.pan_and_scan_min_crop_size = config_positive_int(v, where, key, 1 << 20);
    } else if (key == "pan_and_scan_max_num_crops") {
      if (!v.is_null()) c.pan_and_scan_max_num_crops = config_positive_int(v, where, key, 64);
    } else if (key == "pan_and_scan_min_ratio_to_activate") {
      if (!v.is_null()) c.pan_and_scan_min_ratio_to_activate = config_finite_number(v, where, key);
    } else {
      fail("{}: unknown key \"{}\" for a Gemma 3 image processor (fp4lm reads every key it accepts)", where, key);
    }
  }
  check_image_std(c.image_std, where);
}

Gemma3ProcessorConfig parse_gemma3_processor_config(const nlohmann::json& j, const std::string& where) {
  Gemma3ProcessorConfig c;
  apply_gemma3_processor_config(j, where, c);
  return c;
}

Gemma3ProcessorConfig read_gemma3_processor_config(const std::string& dir) {
  Gemma3ProcessorConfig c;
  const std::string pre = dir + "/preprocessor_config.json", proc = dir + "/processor_config.json";
  if (!std::filesystem::exists(pre) && !std::filesystem::exists(proc))
    fail("{}: neither preprocessor_config.json nor processor_config.json found", dir);
  if (std::filesystem::exists(pre)) apply_gemma3_processor_config(io::read_json_file(pre), pre, c);
  if (std::filesystem::exists(proc)) apply_gemma3_processor_config(io::read_json_file(proc), proc, c);
  return c;
}

}  // namespace fp4lm::vision
