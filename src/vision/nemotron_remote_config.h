#pragma once
// The image processor settings of the remote-code Nemotron VL / Omni checkpoints
// (NemotronH_Nano_VL_V2, NemotronH_Nano_Omni_Reasoning_V3 as NVIDIA ships them), read from
// config.json as vLLM's NanoNemotronVLProcessor reads them: force_image_size, patch_size,
// downsample_ratio, use_thumbnail, norm_mean / norm_std, and vision_config.args' min_num_patches /
// max_num_patches, whose presence selects dynamic resolution (the patch grid of
// vision/nemotron_preprocess.h, with the engine's max_model_len) over fixed-size tiling
// (vision/nemotron_tiling.h). Both resize with torch's uint8 antialiased bicubic, as vLLM does.
// preprocessor_config.json, when present, gives max_num_tiles (default 12, vLLM's) and must agree
// with config.json on the values both hold; its other keys are refused by name.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "vision/nemotron_processor_config.h"

namespace fp4lm::vision {

// config.json's vision_config is the remote-code RADIO config (it has an "args" object).
bool is_nemotron_remote_config(const nlohmann::json& config);

// Error naming the file and field on a missing or inconsistent value.
NemotronProcessorConfig nemotron_remote_processor_config(const nlohmann::json& config, const std::string& config_path,
                                                         int64_t max_model_len, const std::string& dir);

}  // namespace fp4lm::vision
