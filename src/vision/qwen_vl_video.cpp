#include "vision/qwen_vl_video.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "core/error.h"
#include "io/json_file.h"
#include "vision/processor_config_values.h"
#include "vision/torch_resize.h"

namespace fp4lm::vision {

QwenVlVideoConfig parse_qwen_vl_video_config(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) fail("{}: expected a JSON object, found {}", where, j.type_name());
  QwenVlVideoConfig c;
  for (const auto& [key, v] : j.items()) {
    if (key == "video_processor_type") {
      if (!v.is_string() || v.get<std::string>() != "Qwen3VLVideoProcessor")
        fail("{}: \"video_processor_type\" {} is not supported; fp4lm takes video frames for Qwen3VLVideoProcessor "
             "(Qwen3-VL, Qwen3.5) only",
             where, v.dump());
    } else if (key == "processor_class") {
      if (!v.is_string()) fail("{}: \"processor_class\" must be a string, found {}", where, v.dump());
    } else if (key == "size") {
      if (!v.is_object()) fail("{}: \"size\" must be an object, found {}", where, v.dump());
      for (const auto& [sk, sv] : v.items()) {
        if (sk == "shortest_edge") c.min_pixels = config_positive_int(sv, where, "size.shortest_edge", int64_t{1} << 40);
        else if (sk == "longest_edge") c.max_pixels = config_positive_int(sv, where, "size.longest_edge", int64_t{1} << 40);
        else fail("{}: \"size.{}\" is not a Qwen3-VL video size key (expected shortest_edge and longest_edge)", where, sk);
      }
    } else if (key == "patch_size") {
      c.patch_size = static_cast<int>(config_positive_int(v, where, key, 1024));
    } else if (key == "temporal_patch_size") {
      c.temporal_patch_size = static_cast<int>(config_positive_int(v, where, key, 64));
    } else if (key == "merge_size") {
      c.merge_size = static_cast<int>(config_positive_int(v, where, key, 64));
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
      if (!config_bool(v, where, key))
        fail("{}: \"do_convert_rgb\": false is not supported (fp4lm always converts frames to RGB)", where);
    } else if (key == "resample") {
      if (!v.is_number_integer() || v.get<int>() != 3)
        fail("{}: \"resample\" {} is not supported; expected 3 (bicubic, the Qwen processors' filter)", where, v.dump());
    } else if (key == "cap_pixels_per_frame") {
      c.cap_pixels_per_frame = !v.is_null() && config_bool(v, where, key);
    } else if (key == "max_video_tokens") {
      c.max_video_tokens = config_positive_int(v, where, key, int64_t{1} << 30);
    } else if (key == "do_sample_frames" || key == "fps" || key == "min_frames" || key == "max_frames" ||
               key == "num_frames" || key == "max_duration" || key == "return_metadata") {
      // Sampling a decoded file's frames: frames given as a list are taken as they are (vLLM
      // passes pre-sampled frames with do_sample_frames false), so these change nothing here.
      if (!v.is_null() && !v.is_boolean() && !v.is_number())
        fail("{}: \"{}\" must be a number, true / false or null, found {}", where, key, v.dump());
    } else {
      fail("{}: unknown key \"{}\" for a Qwen3-VL video processor (fp4lm reads every key it accepts)", where, key);
    }
  }
  if (c.min_pixels > c.max_pixels)
    fail("{}: size.shortest_edge ({}) is larger than size.longest_edge ({})", where, c.min_pixels, c.max_pixels);
  check_image_std(c.image_std, where);
  return c;
}

QwenVlVideoConfig read_qwen_vl_video_config(const std::string& path) {
  return parse_qwen_vl_video_config(io::read_json_file(path), path);
}

std::pair<int64_t, int64_t> qwen_vl_video_smart_resize(int64_t frames, int64_t height, int64_t width,
                                                       int64_t temporal_factor, int64_t factor, int64_t min_pixels,
                                                       int64_t max_pixels) {
  if (frames < temporal_factor)
    fail("a video of {} frame(s): the processor needs at least temporal_patch_size = {} frames", frames,
         temporal_factor);
  if (height <= 0 || width <= 0) fail("video frames of {}x{}: both sides must be positive", width, height);
  if (height < factor || width < factor) {  // the small side brought up to one patch window first
    const double s = std::max(static_cast<double>(factor) / static_cast<double>(height),
                              static_cast<double>(factor) / static_cast<double>(width));
    height = static_cast<int64_t>(static_cast<double>(height) * s);
    width = static_cast<int64_t>(static_cast<double>(width) * s);
  }
  const double h = static_cast<double>(height), w = static_cast<double>(width), f = static_cast<double>(factor);
  if (std::max(h, w) / std::min(h, w) > 200)
    fail("video frames of {}x{}: aspect ratio {:.1f} is above the processor's limit of 200", width, height,
         std::max(h, w) / std::min(h, w));
  // Python's round() rounds halves to even, as nearbyint in the default rounding mode.
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  const int64_t t_bar = static_cast<int64_t>(std::nearbyint(static_cast<double>(frames) / static_cast<double>(temporal_factor))) *
                        temporal_factor;
  const double volume = static_cast<double>(frames * height * width);
  if (t_bar * h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(volume / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (t_bar * h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / volume);
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {h_bar, w_bar};
}

namespace {
// The budget the processor's resize gives smart_resize (its per-frame cap when set).
int64_t budget(int64_t frames, const QwenVlVideoConfig& c) {
  if (!c.cap_pixels_per_frame) return c.max_pixels;
  const int64_t factor = int64_t{c.patch_size} * c.merge_size;
  const int64_t cap = c.max_video_tokens * factor * factor;
  const int64_t floor_px = static_cast<int64_t>(static_cast<double>(c.min_pixels) * 1.05);
  return std::max(std::min(cap, c.max_pixels / frames), floor_px) * frames;
}
}  // namespace

GridThw qwen_vl_video_grid(int64_t frames, int64_t height, int64_t width, const QwenVlVideoConfig& c) {
  const int64_t factor = int64_t{c.patch_size} * c.merge_size, T = c.temporal_patch_size;
  if (frames <= 0) fail("a video of no frames: at least {} are needed", T);
  int64_t rh = height, rw = width;
  if (c.do_resize) {
    std::tie(rh, rw) = qwen_vl_video_smart_resize(frames, height, width, T, factor, c.min_pixels, budget(frames, c));
  } else if (height % factor || width % factor) {
    fail("video frames of {}x{}: with do_resize false both sides must be multiples of patch_size * merge_size = {}",
         width, height, factor);
  }
  return {(frames + T - 1) / T, rh / c.patch_size, rw / c.patch_size};
}

QwenVlPixels qwen_vl_video_preprocess(const std::vector<RgbImage>& frames, const QwenVlVideoConfig& c) {
  const int64_t p = c.patch_size, m = c.merge_size, T = c.temporal_patch_size;
  const int64_t n = static_cast<int64_t>(frames.size());
  if (n == 0) fail("a video of no frames: at least {} are needed", T);
  for (size_t i = 1; i < frames.size(); ++i)
    if (frames[i].width != frames[0].width || frames[i].height != frames[0].height)
      fail("video frame {} is {}x{}, but frame 1 is {}x{}: a video's frames must all be the same size", i + 1,
           frames[i].width, frames[i].height, frames[0].width, frames[0].height);
  const GridThw g = qwen_vl_video_grid(n, frames[0].height, frames[0].width, c);
  const int64_t rh = g.h * p, rw = g.w * p;
  if (rh * rw * n > (int64_t{1} << 31))
    fail("video of {} frames of {}x{}: resized to {}x{}, more pixels than fp4lm processes", n, frames[0].width,
         frames[0].height, rw, rh);
  std::vector<RgbImage> resized;
  resized.reserve(frames.size());
  for (const RgbImage& f : frames)
    resized.push_back(c.do_resize ? resize_bicubic_torch_aa(f, static_cast<int>(rw), static_cast<int>(rh)) : f);
  // The torchvision backend fuses rescale into normalize: (x - mean / rescale) / (std / rescale),
  // the fused mean and std float32 (a float32 tensor times a Python float), the rest float32.
  float lut[3][256];
  const float inv = static_cast<float>(1.0 / c.rescale_factor);
  for (int ch = 0; ch < 3; ++ch)
    for (int v = 0; v < 256; ++v) {
      float x = static_cast<float>(v);
      if (c.do_normalize && c.do_rescale) x = (x - c.image_mean[ch] * inv) / (c.image_std[ch] * inv);
      else if (c.do_normalize) x = (x - c.image_mean[ch]) / c.image_std[ch];
      else if (c.do_rescale) x = x * static_cast<float>(c.rescale_factor);
      lut[ch][v] = x;
    }
  QwenVlPixels out;
  out.grid = g;
  out.rows = g.t * g.h * g.w;
  out.cols = 3 * T * p * p;
  out.pixel_values.resize(static_cast<size_t>(out.rows * out.cols));
  float* dst = out.pixel_values.data();
  for (int64_t gt = 0; gt < g.t; ++gt)
    for (int64_t by = 0; by < g.h / m; ++by)
      for (int64_t bx = 0; bx < g.w / m; ++bx)
        for (int64_t my = 0; my < m; ++my)
          for (int64_t mx = 0; mx < m; ++mx) {
            const int64_t y0 = (by * m + my) * p, x0 = (bx * m + mx) * p;
            for (int ch = 0; ch < 3; ++ch)
              for (int64_t t = 0; t < T; ++t) {
                // An odd count: the last frame repeated to a whole temporal patch.
                const RgbImage& f = resized[static_cast<size_t>(std::min(gt * T + t, n - 1))];
                for (int64_t py = 0; py < p; ++py)
                  for (int64_t px = 0; px < p; ++px)
                    *dst++ = lut[ch][f.at(static_cast<int>(y0 + py), static_cast<int>(x0 + px), ch)];
              }
          }
  return out;
}

std::vector<std::string> qwen3_vl_video_timestamps(int64_t frames, int64_t T, double fps) {
  if (frames <= 0 || T <= 0 || !(fps > 0)) fail("video timestamps of {} frames at {} fps", frames, fps);
  std::vector<std::string> out;
  for (int64_t first = 0; first < frames; first += T) {
    const int64_t last = std::min(first + T - 1, frames - 1);
    const double t = (static_cast<double>(first) / fps + static_cast<double>(last) / fps) / 2;
    out.push_back(fmt::format("<{:.1f} seconds>", t));
  }
  return out;
}

}  // namespace fp4lm::vision
