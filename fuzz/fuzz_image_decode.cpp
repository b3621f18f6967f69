// libFuzzer target: any byte string as an image file (a chat request's image). decode_image must
// either throw fp4lm::Error or return an image within the limits whose buffer matches its size;
// then the Qwen2-VL preprocessing of it (resize, normalize, patches) must hold its shapes too.
// Anything else (another exception type, a sanitizer report, a hang, a huge allocation) is a finding.
#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "vision/image_decode.h"
#include "vision/qwen_vl_preprocess.h"

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fp4lm::vision;
  ImageLimits limits;
  limits.max_pixels = 1 << 20;  // keeps each input fast; the checks are the same at any limit
  limits.max_side = 4096;
  limits.max_jpeg_scans = 64;
  RgbImage img;
  try {
    img = decode_image({data, size}, limits, "fuzz-input");
  } catch (const fp4lm::Error&) {
    return 0;
  }
  require(img.width > 0 && img.height > 0 && img.width <= limits.max_side && img.height <= limits.max_side);
  require(uint64_t(img.width) * img.height <= limits.max_pixels);
  require(img.rgb.size() == size_t(img.width) * img.height * 3);

  QwenVlProcessorConfig cfg;
  cfg.patch_size = 4;
  cfg.min_pixels = 64;
  cfg.max_pixels = 4096;
  try {
    const QwenVlPixels px = qwen_vl_preprocess(img, cfg);
    require(px.grid.t == 1 && px.grid.h > 0 && px.grid.w > 0 && px.grid.h % 2 == 0 && px.grid.w % 2 == 0);
    require(px.rows == px.grid.h * px.grid.w && px.cols == 3 * 2 * 4 * 4);
    require(px.pixel_values.size() == size_t(px.rows * px.cols));
  } catch (const fp4lm::Error&) {  // an aspect ratio above 200
    return 0;
  }
  return 0;
}
