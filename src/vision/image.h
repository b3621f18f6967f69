#pragma once
// A decoded still image as the processors receive it: 8-bit RGB, row-major, channels interleaved
// (what Pillow's Image.convert("RGB") holds; docs/VISION.md).
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp4lm::vision {

struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // height * width * 3

  uint8_t at(int y, int x, int c) const { return rgb[(static_cast<size_t>(y) * width + x) * 3 + c]; }
};

}  // namespace fp4lm::vision
