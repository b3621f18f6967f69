#include "vision/nemotron_remote_config.h"

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/json_file.h"
#include "vision/processor_config_values.h"

namespace fp4lm::vision {

bool is_nemotron_remote_config(const nlohmann::json& c) {
  return c.is_object() && c.contains("vision_config") && c["vision_config"].is_object() &&
         c["vision_config"].contains("args") && c["vision_config"]["args"].is_object();
}

NemotronProcessorConfig nemotron_remote_processor_config(const nlohmann::json& c, const std::string& file,
                                                         int64_t max_model_len, const std::string& dir) {
  if (!is_nemotron_remote_config(c)) fail("{}: vision_config has no 'args' object (not a remote-code RADIO config)", file);
  NemotronProcessorConfig p;
  p.uint8_resize = true;
  const auto get = [&](const char* key) -> const nlohmann::json* {
    return c.contains(key) && !c[key].is_null() ? &c[key] : nullptr;
  };
  if (const auto* v = get("patch_size")) p.patch_size = static_cast<int>(config_positive_int(*v, file, "patch_size", 1024));
  if (const auto* v = get("downsample_ratio")) {
    p.downsample_ratio = config_finite_number(*v, file, "downsample_ratio");
    const double inv = 1.0 / p.downsample_ratio;
    if (!(p.downsample_ratio > 0) || std::fabs(inv - std::round(inv)) > 1e-9)
      fail("{}: field 'downsample_ratio' must be 1 / n for a whole n (the pixel shuffle), found {}", file, v->dump());
  }
  for (const char* key : {"norm_mean", "norm_std"}) {
    const auto* v = get(key);
    if (!v) fail("{}: field '{}' is missing; the remote-code processor normalizes with it", file, key);
    (key[5] == 'm' ? p.image_mean : p.image_std) = config_rgb_triple(*v, file, key);
  }
  check_image_std(p.image_std, file);
  if (const auto* v = get("use_thumbnail")) p.use_thumbnail = config_bool(*v, file, "use_thumbnail");
  const nlohmann::json& args = c["vision_config"]["args"];
  if (args.contains("min_num_patches") && !args["min_num_patches"].is_null()) {
    // Dynamic resolution (vLLM's DynamicResolutionImageTiler): the patch budget from max_model_len.
    p.min_num_patches = config_positive_int(args["min_num_patches"], file + ": vision_config.args", "min_num_patches",
                                            int64_t{1} << 30);
    if (!args.contains("max_num_patches") || !args["max_num_patches"].is_number_integer() ||
        args["max_num_patches"].get<int64_t>() < 0)
      fail("{}: vision_config.args has min_num_patches but no integer max_num_patches >= 0", file);
    p.max_num_patches = args["max_num_patches"].get<int64_t>();
    if (max_model_len <= 4) fail("{}: max_model_len {} leaves no room for image tokens", file, max_model_len);
    p.max_model_len = max_model_len;
    if (p.merge_size() != 2)
      fail("{}: downsample_ratio {}: vLLM's dynamic-resolution tiler takes 0.5 only", file, p.downsample_ratio);
  } else {
    const auto* v = get("force_image_size");
    if (!v) fail("{}: neither vision_config.args.min_num_patches (dynamic resolution) nor force_image_size (tiling)", file);
    p.tile_size = config_positive_int(*v, file, "force_image_size", 1 << 16);
    if (p.tile_size % p.patch_size != 0 || (p.tile_size / p.patch_size) % p.merge_size() != 0)
      fail("{}: force_image_size {} is not a multiple of patch_size {} x the pixel shuffle's {}", file, p.tile_size,
           p.patch_size, p.merge_size());
  }
  const std::string pre = (std::filesystem::path(dir) / "preprocessor_config.json").string();
  if (std::filesystem::exists(pre)) {
    const nlohmann::json j = io::read_json_file(pre);
    if (!j.is_object()) fail("{}: expected a JSON object", pre);
    const auto agree = [&](const std::string& key, double ours) {
      if (!j[key].is_number() || std::fabs(j[key].get<double>() - ours) > 1e-9)
        fail("{}: \"{}\" {} disagrees with config.json's {}", pre, key, j[key].dump(), ours);
    };
    for (const auto& [key, v] : j.items()) {
      if (key == "max_num_tiles") {
        p.max_num_tiles = config_positive_int(v, pre, key, 1024);
      } else if (key == "image_size") {
        if (p.tile_size > 0 || c.contains("force_image_size")) agree(key, c.value("force_image_size", 0.0));
      } else if (key == "patch_size") {
        agree(key, p.patch_size);
      } else if (key == "downsample_ratio") {
        agree(key, p.downsample_ratio);
      } else if (key == "use_thumbnail") {
        if (config_bool(v, pre, key) != p.use_thumbnail)
          fail("{}: \"use_thumbnail\" {} disagrees with config.json's", pre, v.dump());
      } else if (key == "norm_mean" || key == "norm_std" || key == "image_mean" || key == "image_std") {
        const std::array<float, 3> t = config_rgb_triple(v, pre, key);
        if (t != (key.find("mean") != std::string::npos ? p.image_mean : p.image_std))
          fail("{}: \"{}\" {} disagrees with config.json's norm values", pre, key, v.dump());
      } else if (key == "image_processor_type" || key == "processor_class" || key == "auto_map") {
        // the remote code's class names: this file describes it
      } else {
        fail("{}: unknown key \"{}\" for the remote-code Nemotron image processor (fp4lm reads every key it accepts)",
             pre, key);
      }
    }
  }
  return p;
}

}  // namespace fp4lm::vision
