#pragma once
// Qwen3-VL video given as frames (issue 43), as transformers 5.24's Qwen3VLVideoProcessor computes
// it (video_preprocessor_config.json): the frames taken as given (vLLM's form for pre-sampled
// frames: no sampling), the video smart_resize (the frame count in the pixel budget), each frame
// resized by torch's uint8 antialiased bicubic (vision/torch_resize.h), rescale and normalize fused
// as the torchvision backend does them in float32, an odd frame count padded with the last frame
// to whole temporal patches, and the patches flattened in the merge-window order the vision tower
// reads (rows: temporal group, merge block, position in block; columns: channel, frame in group,
// patch pixel). The prompt side: the timestamps Qwen3VLProcessor writes before each frame group.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "vision/image.h"
#include "vision/qwen_vl_preprocess.h"

namespace fp4lm::vision {

struct QwenVlVideoConfig {
  int64_t min_pixels = 128 * 32 * 32;  // size.shortest_edge (all frames together)
  int64_t max_pixels = 32 * 32 * 768;  // size.longest_edge
  int patch_size = 16;
  int temporal_patch_size = 2;
  int merge_size = 2;
  std::array<float, 3> image_mean{0.5f, 0.5f, 0.5f};  // IMAGENET_STANDARD_MEAN
  std::array<float, 3> image_std{0.5f, 0.5f, 0.5f};
  double rescale_factor = 1.0 / 255.0;
  bool do_resize = true;
  bool do_rescale = true;
  bool do_normalize = true;
  // qwen-vl-utils' per-frame cap on the budget (the processor's cap_pixels_per_frame).
  bool cap_pixels_per_frame = false;
  int64_t max_video_tokens = 768;
};

// From video_preprocessor_config.json's object; every key read or refused by name (`where` names
// the file). Only Qwen3VLVideoProcessor is accepted: another video_processor_type is an Error.
QwenVlVideoConfig parse_qwen_vl_video_config(const nlohmann::json& j, const std::string& where);
QwenVlVideoConfig read_qwen_vl_video_config(const std::string& path);

// The processor's smart_resize for `frames` frames of height x width: (height, width) every frame
// is resized to. Errors as the processor: fewer frames than temporal_patch_size, aspect ratio over 200.
std::pair<int64_t, int64_t> qwen_vl_video_smart_resize(int64_t frames, int64_t height, int64_t width,
                                                       int64_t temporal_factor, int64_t factor, int64_t min_pixels,
                                                       int64_t max_pixels);

// The grid (t, h, w in patches) `frames` frames of this size get, without touching pixels.
GridThw qwen_vl_video_grid(int64_t frames, int64_t height, int64_t width, const QwenVlVideoConfig& config);

// The frames (all the same size: Error naming the first that differs; at least temporal_patch_size
// of them) -> pixel_values_videos and video_grid_thw's row.
QwenVlPixels qwen_vl_video_preprocess(const std::vector<RgbImage>& frames, const QwenVlVideoConfig& config);

// Qwen3VLProcessor's text before each of the grid's t frame groups: "<%.1f seconds>" of the mean
// time of the group's first and last frame, frames numbered 0.. at `fps` (the processor's 24
// when the video's metadata has none), the last frame repeated to whole groups.
std::vector<std::string> qwen3_vl_video_timestamps(int64_t frames, int64_t temporal_patch_size, double fps = 24.0);

}  // namespace fp4lm::vision
