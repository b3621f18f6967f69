#pragma once
// Image files (JPEG, PNG, WebP) to 8-bit RGB as transformers' processors see them after Pillow
// opened the file: EXIF orientation applied (transformers.image_utils.load_image), grey and palette
// expanded, 16-bit reduced as Pillow does, transparency composited onto white
// (transformers.image_transforms.convert_to_rgb), CMYK converted with Pillow's formula.
// Limits are checked from the header, before any pixel buffer is allocated. Every failure is an
// Error naming the image (`name`) and what was expected versus found; nothing aborts or hangs.
#include <cstdint>
#include <span>
#include <string>

#include "vision/image.h"

namespace fp4lm::vision {

struct ImageLimits {
  uint64_t max_bytes = 64ull << 20;        // the encoded file
  uint64_t max_pixels = 40'000'000;        // width * height (about 6300 x 6300)
  int max_side = 32768;                    // either dimension
  int max_jpeg_scans = 256;                // progressive JPEG scans (a scan bomb costs a full pass each)
};

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp };
const char* image_format_name(ImageFormat f);

// The format from the file's magic bytes (not from a name or a MIME type).
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);

// Decodes `bytes`; `name` identifies the image in errors ("image 2", a file name).
RgbImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& name);

}  // namespace fp4lm::vision
