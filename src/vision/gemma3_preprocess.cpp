#include "vision/gemma3_preprocess.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace fp4lm::vision {

std::vector<CropBox> gemma3_pan_and_scan(int height, int width, const Gemma3ProcessorConfig& c) {
  if (!c.do_pan_and_scan || height <= 0 || width <= 0) return {};
  const double h = height, w = width;
  const int64_t min_crop = c.pan_and_scan_min_crop_size;
  // The long side gets floor(ratio + 0.5) crops, no more than fit at the minimum size, then
  // clamped into [2, max_num_crops] (the clamp to max last, as the processor).
  const bool landscape = width >= height;
  const double ratio = landscape ? w / h : h / w;
  if (ratio < c.pan_and_scan_min_ratio_to_activate) return {};
  const int64_t long_side = landscape ? width : height;
  int64_t n = static_cast<int64_t>(std::floor(ratio + 0.5));
  n = std::min(static_cast<int64_t>(std::floor(static_cast<double>(long_side) / static_cast<double>(min_crop))), n);
  n = std::max<int64_t>(2, n);
  n = std::min(c.pan_and_scan_max_num_crops, n);
  const int64_t nw = landscape ? n : 1, nh = landscape ? 1 : n;
  const int64_t cw = static_cast<int64_t>(std::ceil(w / static_cast<double>(nw)));
  const int64_t ch = static_cast<int64_t>(std::ceil(h / static_cast<double>(nh)));
  if (std::min(cw, ch) < min_crop) return {};
  std::vector<CropBox> crops;
  for (int64_t i = 0; i < nh; ++i)
    for (int64_t j = 0; j < nw; ++j) {
      // numpy slicing: the last crop is cut off at the image's edge.
      CropBox b;
      b.x = static_cast<int>(j * cw);
      b.y = static_cast<int>(i * ch);
      b.width = static_cast<int>(std::min<int64_t>(cw, width - j * cw));
      b.height = static_cast<int>(std::min<int64_t>(ch, height - i * ch));
      if (b.width <= 0 || b.height <= 0)
        fail("image of {}x{}: pan-and-scan crop {} of {} would be empty (pan_and_scan_min_crop_size {} is too "
             "small for this image; the processor fails here too)",
             width, height, i * nw + j + 1, nh * nw, min_crop);
      crops.push_back(b);
    }
  return crops;
}

int64_t gemma3_image_tokens(int height, int width, const Gemma3ProcessorConfig& c) {
  return (1 + static_cast<int64_t>(gemma3_pan_and_scan(height, width, c).size())) * c.image_seq_length;
}

namespace {

RgbImage crop(const RgbImage& in, const CropBox& b) {
  RgbImage out;
  out.width = b.width;
  out.height = b.height;
  out.rgb.resize(static_cast<size_t>(b.width) * b.height * 3);
  for (int y = 0; y < b.height; ++y)
    std::copy_n(&in.rgb[(static_cast<size_t>(b.y + y) * in.width + b.x) * 3], static_cast<size_t>(b.width) * 3,
                &out.rgb[static_cast<size_t>(y) * b.width * 3]);
  return out;
}

}  // namespace

Gemma3Pixels gemma3_preprocess(const RgbImage& image, const Gemma3ProcessorConfig& c) {
  const std::vector<CropBox> crops = gemma3_pan_and_scan(image.height, image.width, c);
  if (!c.do_resize && !crops.empty())
    fail("image of {}x{}: pan-and-scan with do_resize false gives crops of another size than the image; fp4lm "
         "needs do_resize true for pan-and-scan",
         image.width, image.height);
  // float32(float64(x) * rescale_factor), then (x - mean) / std in float32: numpy's rescale and
  // normalize in transformers.image_transforms.
  float lut[3][256];
  for (int ch = 0; ch < 3; ++ch)
    for (int v = 0; v < 256; ++v) {
      float x = c.do_rescale ? static_cast<float>(static_cast<double>(v) * c.rescale_factor) : static_cast<float>(v);
      if (c.do_normalize) x = (x - c.image_mean[ch]) / c.image_std[ch];
      lut[ch][v] = x;
    }
  Gemma3Pixels out;
  out.num_crops = static_cast<int64_t>(crops.size());
  out.images = 1 + out.num_crops;
  out.height = c.do_resize ? c.height : image.height;
  out.width = c.do_resize ? c.width : image.width;
  if (out.images * 3 * out.height * out.width > (int64_t{1} << 31))
    fail("image of {}x{}: {} images of {}x{} are more values than fp4lm processes", image.width, image.height,
         out.images, out.width, out.height);
  const size_t plane = static_cast<size_t>(out.height * out.width);
  out.pixel_values.resize(static_cast<size_t>(out.images) * 3 * plane);
  for (int64_t k = 0; k < out.images; ++k) {
    RgbImage part = k == 0 ? RgbImage{} : crop(image, crops[static_cast<size_t>(k - 1)]);
    const RgbImage& src = k == 0 ? image : part;
    RgbImage resized;
    const RgbImage* img = &src;
    if (c.do_resize) {
      resized = resize_pillow(src, c.width, c.height, c.resample);
      img = &resized;
    }
    float* dst = &out.pixel_values[static_cast<size_t>(k) * 3 * plane];
    for (int ch = 0; ch < 3; ++ch)
      for (size_t i = 0; i < plane; ++i) dst[ch * plane + i] = lut[ch][img->rgb[i * 3 + ch]];
  }
  return out;
}

}  // namespace fp4lm::vision
