#include "vision/qwen_vl_processor_config.h"

#include <cmath>
#include <set>
#include <type_traits>

#include "core/error.h"
#include "io/json_file.h"
#include "vision/processor_config_values.h"

namespace fp4lm::vision {
namespace {

template <typename T>
T get(const nlohmann::json& j, const char* key, const std::string& where, const char* expected) {
  const auto& v = j.at(key);
  if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) fail("{}: \"{}\" must be {}, found {}", where, key, expected, v.dump());
  } else if constexpr (std::is_integral_v<T>) {
    if (!v.is_number_integer()) fail("{}: \"{}\" must be {}, found {}", where, key, expected, v.dump());
  } else {
    if (!v.is_number()) fail("{}: \"{}\" must be {}, found {}", where, key, expected, v.dump());
  }
  return v.get<T>();
}

}  // namespace

QwenVlProcessorConfig parse_qwen_vl_processor_config(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: expected a JSON object, found {}", where, j.type_name());
  QwenVlProcessorConfig c;
  static const std::set<std::string> kProcessorTypes = {"Qwen2VLImageProcessor", "Qwen2VLImageProcessorFast",
                                                        "Qwen2VLImageProcessorPil"};
  for (const auto& [key, v] : j.items()) {
    if (key == "image_processor_type") {
      if (!v.is_string() || !kProcessorTypes.count(v.get<std::string>()))
        fail("{}: \"image_processor_type\" {} is not a Qwen2-VL image processor (expected one of "
             "Qwen2VLImageProcessor, Qwen2VLImageProcessorFast, Qwen2VLImageProcessorPil)",
             where, v.dump());
    } else if (key == "processor_class") {
      if (!v.is_string()) fail("{}: \"processor_class\" must be a string, found {}", where, v.dump());
    } else if (key == "size") {
      if (!v.is_object()) fail("{}: \"size\" must be an object, found {}", where, v.dump());
      for (const auto& [sk, sv] : v.items()) {
        if (!sv.is_number_integer() || sv.get<int64_t>() <= 0)
          fail("{}: \"size.{}\" must be a positive integer, found {}", where, sk, sv.dump());
        if (sk == "shortest_edge" || sk == "min_pixels") c.min_pixels = sv.get<int64_t>();
        else if (sk == "longest_edge" || sk == "max_pixels") c.max_pixels = sv.get<int64_t>();
        else
          fail("{}: \"size.{}\" is not a Qwen2-VL size key (expected shortest_edge and longest_edge)", where, sk);
      }
    } else if (key == "min_pixels" || key == "max_pixels") {
      // Older files (Qwen2-VL) carry both spellings; transformers lets these override size.
    } else if (key == "patch_size") {
      c.patch_size = get<int>(j, "patch_size", where, "an integer");
    } else if (key == "temporal_patch_size") {
      c.temporal_patch_size = get<int>(j, "temporal_patch_size", where, "an integer");
    } else if (key == "merge_size") {
      c.merge_size = get<int>(j, "merge_size", where, "an integer");
    } else if (key == "image_mean") {
      c.image_mean = config_rgb_triple(j.at("image_mean"), where, "image_mean");
    } else if (key == "image_std") {
      c.image_std = config_rgb_triple(j.at("image_std"), where, "image_std");
    } else if (key == "rescale_factor") {
      c.rescale_factor = get<double>(j, "rescale_factor", where, "a number");
    } else if (key == "do_resize") {
      c.do_resize = get<bool>(j, "do_resize", where, "true or false");
    } else if (key == "do_rescale") {
      c.do_rescale = get<bool>(j, "do_rescale", where, "true or false");
    } else if (key == "do_normalize") {
      c.do_normalize = get<bool>(j, "do_normalize", where, "true or false");
    } else if (key == "do_convert_rgb") {
      if (!get<bool>(j, "do_convert_rgb", where, "true or false"))
        fail("{}: \"do_convert_rgb\": false is not supported (fp4lm always converts images to RGB)", where);
    } else if (key == "resample") {
      if (get<int>(j, "resample", where, "an integer") != 3)
        fail("{}: \"resample\" {} is not supported; expected 3 (bicubic, the Qwen processors' filter)", where,
             v.dump());
    } else {
      fail("{}: unknown key \"{}\" for a Qwen2-VL image processor (fp4lm reads every key it accepts)", where, key);
    }
  }
  // transformers: min_pixels / max_pixels given as keys override size.
  if (j.contains("min_pixels")) c.min_pixels = get<int64_t>(j, "min_pixels", where, "an integer");
  if (j.contains("max_pixels")) c.max_pixels = get<int64_t>(j, "max_pixels", where, "an integer");
  auto positive = [&](const char* k, int64_t v, int64_t most) {
    if (v <= 0 || v > most) fail("{}: \"{}\" must be in 1..{}, found {}", where, k, most, v);
  };
  positive("patch_size", c.patch_size, 1024);
  positive("temporal_patch_size", c.temporal_patch_size, 64);
  positive("merge_size", c.merge_size, 64);
  positive("min_pixels", c.min_pixels, int64_t{1} << 40);
  positive("max_pixels", c.max_pixels, int64_t{1} << 40);
  if (c.min_pixels > c.max_pixels)
    fail("{}: min_pixels ({}) is larger than max_pixels ({})", where, c.min_pixels, c.max_pixels);
  check_image_std(c.image_std, where);
  return c;
}

QwenVlProcessorConfig read_qwen_vl_processor_config(const std::string& path) {
  return parse_qwen_vl_processor_config(io::read_json_file(path), path);
}

}  // namespace fp4lm::vision
