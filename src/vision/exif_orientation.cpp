#include "vision/exif_orientation.h"

#include <cstring>
#include <utility>

namespace fp4lm::vision {

int exif_orientation(std::span<const uint8_t> exif) {
  if (exif.size() >= 6 && std::memcmp(exif.data(), "Exif\0\0", 6) == 0) exif = exif.subspan(6);
  if (exif.size() < 8) return 1;
  bool little;
  if (exif[0] == 'I' && exif[1] == 'I') little = true;
  else if (exif[0] == 'M' && exif[1] == 'M') little = false;
  else return 1;
  auto u16 = [&](size_t at) -> uint32_t {
    return little ? exif[at] | exif[at + 1] << 8 : exif[at] << 8 | exif[at + 1];
  };
  auto u32 = [&](size_t at) -> uint64_t {
    return little ? u16(at) | uint64_t{u16(at + 2)} << 16 : uint64_t{u16(at)} << 16 | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const uint64_t ifd = u32(4);
  if (ifd + 2 > exif.size()) return 1;
  const uint32_t count = u16(ifd);
  for (uint32_t i = 0; i < count; ++i) {
    const uint64_t e = ifd + 2 + uint64_t{i} * 12;
    if (e + 12 > exif.size()) return 1;
    if (u16(e) != 0x0112) continue;
    if (u16(e + 2) != 3 || u32(e + 4) != 1) return 1;  // SHORT, one value
    const uint32_t v = u16(e + 8);
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
  }
  return 1;
}

RgbImage apply_exif_orientation(RgbImage in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const int W = in.width, H = in.height;
  const bool swap = orientation >= 5;  // transpose, rotations by 90 degrees, transverse
  RgbImage out;
  out.width = swap ? H : W;
  out.height = swap ? W : H;
  out.rgb.resize(in.rgb.size());
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sy = y, sx = x;  // the source pixel of (y, x), as Pillow's transpose methods map it
      switch (orientation) {
        case 2: sx = W - 1 - x; break;                       // FLIP_LEFT_RIGHT
        case 3: sy = H - 1 - y; sx = W - 1 - x; break;       // ROTATE_180
        case 4: sy = H - 1 - y; break;                       // FLIP_TOP_BOTTOM
        case 5: sy = x; sx = y; break;                       // TRANSPOSE
        case 6: sy = H - 1 - x; sx = y; break;               // ROTATE_270 (clockwise)
        case 7: sy = H - 1 - x; sx = W - 1 - y; break;       // TRANSVERSE
        case 8: sy = x; sx = W - 1 - y; break;               // ROTATE_90 (counter-clockwise)
      }
      std::memcpy(&out.rgb[(static_cast<size_t>(y) * out.width + x) * 3],
                  &in.rgb[(static_cast<size_t>(sy) * W + sx) * 3], 3);
    }
  }
  return out;
}

}  // namespace fp4lm::vision
