#include "vision/nemotron_preprocess.h"

#include <algorithm>
#include <cfenv>
#include <cmath>

#include "core/error.h"
#include "vision/torch_resize.h"
#include "vision/torch_resize_f32.h"

namespace fp4lm::vision {

int64_t nemotron_patch_budget(const NemotronProcessorConfig& c, int64_t images) {
  const int64_t m = c.merge_size();
  int64_t n = std::max((c.max_model_len - 4) * m * m, c.min_num_patches * images);
  if (c.max_num_patches) n = std::min(n, c.max_num_patches);
  return std::max(n, c.min_num_patches);
}

NemotronGrid nemotron_grid(int64_t height, int64_t width, const NemotronProcessorConfig& c, int64_t images) {
  if (height <= 0 || width <= 0) fail("Nemotron image processor: the image is {} x {}", width, height);
  const int64_t merge = c.merge_size(), lo = c.min_num_patches, hi = nemotron_patch_budget(c, images);
  // Python's round(x + 0.5): half to even, as nearbyint in the default rounding mode.
  auto py_round = [](double x) { return static_cast<int64_t>(std::nearbyint(x)); };
  int64_t gh = py_round(static_cast<double>(height) / c.patch_size + 0.5);
  int64_t gw = py_round(static_cast<double>(width) / c.patch_size + 0.5);
  double factor = std::min(std::sqrt(static_cast<double>(hi) / static_cast<double>(gh * gw)), 1.0);
  gh = static_cast<int64_t>(std::floor(factor * static_cast<double>(gh)));
  gw = static_cast<int64_t>(std::floor(factor * static_cast<double>(gw)));
  if (hi > lo && gh * gw < lo) {
    if (gh * gw == 0)
      fail("Nemotron image processor: a {} x {} image scales to {} x {} patches (a side of 0: the processor "
           "divides by zero); its aspect ratio is too extreme for {} patches",
           width, height, gw, gh, hi);
    factor = std::sqrt(static_cast<double>(lo) / static_cast<double>(gh * gw));
    gh = static_cast<int64_t>(std::ceil(factor * static_cast<double>(gh)));
    gw = static_cast<int64_t>(std::ceil(factor * static_cast<double>(gw)));
  }
  if (const int64_t r = gh % merge) {
    if ((gh + merge - r) * gw <= hi) gh += merge - r;
    else gh = std::max(merge, gh - r);
  }
  if (const int64_t r = gw % merge) {
    if (gh * (gw + merge - r) <= hi) gw += merge - r;
    else gw = std::max(merge, gw - r);
  }
  if (gh <= 0 || gw <= 0)
    fail("Nemotron image processor: a {} x {} image gets a {} x {} patch grid", width, height, gw, gh);
  return {gh, gw};
}

int64_t nemotron_image_tokens(const NemotronGrid& g, const NemotronProcessorConfig& c) {
  const int64_t m = c.merge_size();
  return g.h * g.w / (m * m);
}

std::vector<float> nemotron_uint8_patches(const RgbImage& img, int64_t P, const NemotronProcessorConfig& c) {
  const int64_t gh = img.height / P, gw = img.width / P, cols = 3 * P * P;
  std::vector<float> out(static_cast<size_t>(gh * gw * cols));
  for (int64_t gy = 0; gy < gh; ++gy)
    for (int64_t gx = 0; gx < gw; ++gx) {
      float* dst = out.data() + (gy * gw + gx) * cols;
      for (int ch = 0; ch < 3; ++ch)
        for (int64_t y = 0; y < P; ++y)
          for (int64_t x = 0; x < P; ++x)
            dst[(ch * P + y) * P + x] =
                (static_cast<float>(img.at(static_cast<int>(gy * P + y), static_cast<int>(gx * P + x), ch)) / 255.0f -
                 c.image_mean[static_cast<size_t>(ch)]) /
                c.image_std[static_cast<size_t>(ch)];
    }
  return out;
}

NemotronPixels nemotron_preprocess(const RgbImage& image, const NemotronProcessorConfig& c, int64_t images) {
  const NemotronGrid g = nemotron_grid(image.height, image.width, c, images);
  const int64_t P = c.patch_size, H = g.h * P, W = g.w * P;
  if (c.uint8_resize) {
    // vLLM's remote-code path (DynamicResolutionImageTiler.apply_params): F.interpolate on the uint8
    // image, / 255, then (x - mean) / std in float32.
    NemotronPixels out;
    out.grid = g;
    out.rows = g.h * g.w;
    out.cols = 3 * P * P;
    out.pixel_values = nemotron_uint8_patches(resize_bicubic_torch_aa(image, static_cast<int>(W), static_cast<int>(H)),
                                              P, c);
    return out;
  }
  std::vector<float> chw(static_cast<size_t>(3) * image.height * image.width);
  for (int y = 0; y < image.height; ++y)
    for (int x = 0; x < image.width; ++x)
      for (int ch = 0; ch < 3; ++ch)
        chw[(static_cast<size_t>(ch) * image.height + y) * image.width + x] = image.at(y, x, ch);
  if (H != image.height || W != image.width)
    chw = resize_bicubic_antialias_torch(chw, 3, image.height, image.width, static_cast<int>(H), static_cast<int>(W));
  // transformers fuses the rescale into the normalization: mean and std as float32 tensors times
  // 1 / rescale_factor, then (x - mean) / std; without normalization, x * rescale_factor.
  const float inv = static_cast<float>(1.0 / c.rescale_factor);
  for (int ch = 0; ch < 3; ++ch) {
    float* p = chw.data() + static_cast<size_t>(ch) * H * W;
    const float mean = c.do_rescale ? c.image_mean[ch] * inv : c.image_mean[ch];
    const float std = c.do_rescale ? c.image_std[ch] * inv : c.image_std[ch];
    const float scale = static_cast<float>(c.rescale_factor);
    for (int64_t i = 0; i < H * W; ++i) {
      if (c.do_normalize) p[i] = (p[i] - mean) / std;
      else if (c.do_rescale) p[i] = p[i] * scale;
    }
  }
  NemotronPixels out;
  out.grid = g;
  out.rows = g.h * g.w;
  out.cols = 3 * P * P;
  out.pixel_values.resize(static_cast<size_t>(out.rows * out.cols));
  for (int64_t gy = 0; gy < g.h; ++gy)
    for (int64_t gx = 0; gx < g.w; ++gx) {
      float* dst = out.pixel_values.data() + (gy * g.w + gx) * out.cols;
      for (int64_t ch = 0; ch < 3; ++ch)
        for (int64_t y = 0; y < P; ++y)
          std::copy_n(chw.data() + (ch * H + gy * P + y) * W + gx * P, P, dst + (ch * P + y) * P);
    }
  return out;
}

}  // namespace fp4lm::vision
