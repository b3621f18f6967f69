#include "vision/qwen_vl_preprocess.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "vision/pillow_resize.h"

namespace fp4lm::vision {

std::pair<int64_t, int64_t> qwen_vl_smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                                 int64_t max_pixels) {
  const double h = static_cast<double>(height), w = static_cast<double>(width), f = static_cast<double>(factor);
  if (std::max(h, w) / std::min(h, w) > 200)
    fail("image of {}x{}: aspect ratio {:.1f} is above the processor's limit of 200", width, height,
         std::max(h, w) / std::min(h, w));
  // Python's round() rounds halves to even, as nearbyint in the default rounding mode.
  int64_t h_bar = static_cast<int64_t>(std::nearbyint(h / f)) * factor;
  int64_t w_bar = static_cast<int64_t>(std::nearbyint(w / f)) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt((h * w) / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {h_bar, w_bar};
}

GridThw qwen_vl_grid(int64_t height, int64_t width, const QwenVlProcessorConfig& c) {
  const int64_t factor = int64_t{c.patch_size} * c.merge_size;
  if (!c.do_resize) {
    if (height % factor || width % factor)
      fail("image of {}x{}: with do_resize false both sides must be multiples of patch_size * merge_size = {}", width,
           height, factor);
    return {1, height / c.patch_size, width / c.patch_size};
  }
  const auto [rh, rw] = qwen_vl_smart_resize(height, width, factor, c.min_pixels, c.max_pixels);
  return {1, rh / c.patch_size, rw / c.patch_size};
}

int64_t qwen_vl_image_tokens(const GridThw& g, const QwenVlProcessorConfig& c) {
  return g.t * g.h * g.w / (int64_t{c.merge_size} * c.merge_size);
}

QwenVlPixels qwen_vl_preprocess(const RgbImage& image, const QwenVlProcessorConfig& c) {
  const int64_t p = c.patch_size, m = c.merge_size, T = c.temporal_patch_size;
  const int64_t factor = p * m;
  RgbImage resized;
  const RgbImage* img = &image;
  if (c.do_resize) {
    const auto [rh, rw] = qwen_vl_smart_resize(image.height, image.width, factor, c.min_pixels, c.max_pixels);
    if (rh * rw > (int64_t{1} << 31))
      fail("image of {}x{}: resized to {}x{}, more pixels than fp4lm processes (max_pixels {})", image.width,
           image.height, rw, rh, c.max_pixels);
    resized = resize_bicubic_pillow(image, static_cast<int>(rw), static_cast<int>(rh));
    img = &resized;
  } else if (image.height % factor || image.width % factor) {
    fail("image of {}x{}: with do_resize false both sides must be multiples of patch_size * merge_size = {}",
         image.width, image.height, factor);
  }
  // float32(float64(x) * rescale_factor), then (x - mean) / std in float32: numpy's rescale and
  // normalize in transformers.image_transforms.
  float lut[3][256];
  for (int ch = 0; ch < 3; ++ch) {
    for (int v = 0; v < 256; ++v) {
      float x = c.do_rescale ? static_cast<float>(static_cast<double>(v) * c.rescale_factor) : static_cast<float>(v);
      if (c.do_normalize) x = (x - c.image_mean[ch]) / c.image_std[ch];
      lut[ch][v] = x;
    }
  }
  const int64_t gh = img->height / p, gw = img->width / p;
  QwenVlPixels out;
  out.grid = {1, gh, gw};
  out.rows = gh * gw;
  out.cols = 3 * T * p * p;
  out.pixel_values.resize(static_cast<size_t>(out.rows * out.cols));
  // Rows in (block_y, block_x, y in block, x in block) order; columns (channel, t, py, px).
  float* dst = out.pixel_values.data();
  for (int64_t by = 0; by < gh / m; ++by)
    for (int64_t bx = 0; bx < gw / m; ++bx)
      for (int64_t my = 0; my < m; ++my)
        for (int64_t mx = 0; mx < m; ++mx) {
          const int64_t y0 = (by * m + my) * p, x0 = (bx * m + mx) * p;
          for (int ch = 0; ch < 3; ++ch)
            for (int64_t t = 0; t < T; ++t)
              for (int64_t py = 0; py < p; ++py)
                for (int64_t px = 0; px < p; ++px) *dst++ = lut[ch][img->at(static_cast<int>(y0 + py), static_cast<int>(x0 + px), ch)];
        }
  return out;
}

}  // namespace fp4lm::vision
