#include "vision/gemma4_preprocess.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "vision/pillow_resize.h"

namespace fp4lm::vision {

std::pair<int64_t, int64_t> gemma4_target_size(int64_t height, int64_t width, const Gemma4ProcessorConfig& c) {
  const int64_t p = c.patch_size, k = c.pooling_kernel_size;
  const int64_t max_patches = c.max_patches();
  const double target_px = static_cast<double>(max_patches * p * p);
  const double factor = std::sqrt(target_px / (static_cast<double>(height) * static_cast<double>(width)));
  const int64_t side = k * p;
  int64_t th = static_cast<int64_t>(std::floor(factor * static_cast<double>(height) / static_cast<double>(side))) * side;
  int64_t tw = static_cast<int64_t>(std::floor(factor * static_cast<double>(width) / static_cast<double>(side))) * side;
  if (th == 0 && tw == 0)
    fail("image of {}x{}: resizes to 0 x 0 within {} patches of {} (sides multiples of {})", width, height,
         max_patches, p, side);
  // A very elongated image: the short side gets one pooling window, the long side its ratio of
  // them, capped at what the budget allows in one row.
  const int64_t max_side = (max_patches / (k * k)) * side;
  if (th == 0) {
    th = side;
    tw = std::min(static_cast<int64_t>(std::floor(static_cast<double>(width) / static_cast<double>(height))) * side,
                  max_side);
  } else if (tw == 0) {
    tw = side;
    th = std::min(static_cast<int64_t>(std::floor(static_cast<double>(height) / static_cast<double>(width))) * side,
                  max_side);
  }
  if (static_cast<double>(th * tw) > target_px)
    fail("image of {}x{}: resized to {}x{}, which exceeds {} patches of {} (the processor fails here too)", width,
         height, tw, th, max_patches, p);
  return {th, tw};
}

int64_t gemma4_image_tokens(int64_t height, int64_t width, const Gemma4ProcessorConfig& c) {
  auto [h, w] = c.do_resize ? gemma4_target_size(height, width, c) : std::pair<int64_t, int64_t>{height, width};
  return (h / c.patch_size) * (w / c.patch_size) / (int64_t{c.pooling_kernel_size} * c.pooling_kernel_size);
}

Gemma4Pixels gemma4_preprocess(const RgbImage& image, const Gemma4ProcessorConfig& c) {
  const int64_t p = c.patch_size;
  RgbImage resized;
  const RgbImage* img = &image;
  if (c.do_resize) {
    const auto [th, tw] = gemma4_target_size(image.height, image.width, c);
    if (th != image.height || tw != image.width) {
      resized = resize_pillow(image, static_cast<int>(tw), static_cast<int>(th), c.resample);
      img = &resized;
    }
  }
  if (img->height % p || img->width % p)
    fail("image of {}x{}: with do_resize false both sides must be multiples of patch_size {}", image.width,
         image.height, p);
  Gemma4Pixels out;
  out.height = img->height;
  out.width = img->width;
  const int64_t gh = out.height / p, gw = out.width / p;
  out.patches = gh * gw;
  if (out.patches > c.max_patches())
    fail("image of {}x{}: {} patches, more than the budget of {} (with do_resize false the image must fit it)",
         image.width, image.height, out.patches, c.max_patches());
  out.rows = c.max_patches();
  out.cols = p * p * 3;
  out.soft_tokens = out.patches / (int64_t{c.pooling_kernel_size} * c.pooling_kernel_size);
  // float32(float64(x) * rescale_factor), then (x - mean) / std in float32: numpy's rescale and
  // normalize in transformers.image_transforms.
  float lut[3][256];
  for (int ch = 0; ch < 3; ++ch)
    for (int v = 0; v < 256; ++v) {
      float x = c.do_rescale ? static_cast<float>(static_cast<double>(v) * c.rescale_factor) : static_cast<float>(v);
      if (c.do_normalize) x = (x - c.image_mean[ch]) / c.image_std[ch];
      lut[ch][v] = x;
    }
  out.pixel_values.assign(static_cast<size_t>(out.rows * out.cols), 0.0f);
  out.position_ids.assign(static_cast<size_t>(out.rows * 2), -1);
  float* dst = out.pixel_values.data();
  for (int64_t py = 0; py < gh; ++py)
    for (int64_t px = 0; px < gw; ++px) {
      const int64_t r = py * gw + px;
      out.position_ids[static_cast<size_t>(r * 2)] = px;
      out.position_ids[static_cast<size_t>(r * 2 + 1)] = py;
      for (int64_t y = 0; y < p; ++y)
        for (int64_t x = 0; x < p; ++x)
          for (int ch = 0; ch < 3; ++ch)
            *dst++ = lut[ch][img->at(static_cast<int>(py * p + y), static_cast<int>(px * p + x), ch)];
    }
  return out;
}

}  // namespace fp4lm::vision
