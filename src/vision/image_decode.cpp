#include "vision/image_decode.h"

#include <algorithm>
#include <cstring>

#include <fmt/ranges.h>

#include "core/error.h"
#include "vision/image_codecs.h"

namespace fp4lm::vision {

const char* image_format_name(ImageFormat f) {
  switch (f) {
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kWebp: return "WebP";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

ImageFormat sniff_image_format(std::span<const uint8_t> b) {
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return ImageFormat::kJpeg;
  if (b.size() >= 8 && std::memcmp(b.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::kPng;
  if (b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(b.data() + 8, "WEBP", 4) == 0)
    return ImageFormat::kWebp;
  return ImageFormat::kUnknown;
}

RgbImage decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& name) {
  if (bytes.size() > limits.max_bytes)
    fail("{}: the encoded image is {} bytes, more than the limit of {}", name, bytes.size(), limits.max_bytes);
  switch (sniff_image_format(bytes)) {
    case ImageFormat::kJpeg: return detail::decode_jpeg(bytes, limits, name);
    case ImageFormat::kPng: return detail::decode_png(bytes, limits, name);
    case ImageFormat::kWebp: return detail::decode_webp(bytes, limits, name);
    case ImageFormat::kUnknown: break;
  }
  fail("{}: not an image fp4lm decodes: expected JPEG, PNG or WebP data, found {} bytes starting {:02x}", name,
       bytes.size(), fmt::join(bytes.subspan(0, std::min<size_t>(bytes.size(), 8)), " "));
}

namespace detail {

void check_dimensions(uint64_t width, uint64_t height, const ImageLimits& limits, const std::string& name,
                      const char* format) {
  if (width == 0 || height == 0) fail("{}: {} image has no pixels ({}x{})", name, format, width, height);
  if (width > static_cast<uint64_t>(limits.max_side) || height > static_cast<uint64_t>(limits.max_side) ||
      width * height > limits.max_pixels)
    fail("{}: {} image of {}x{} pixels is larger than the limit ({} pixels, {} per side)", name, format, width,
         height, limits.max_pixels, limits.max_side);
}

void composite_rgba_on_white(const uint8_t* rgba, uint8_t* rgb, size_t pixels) {
  // AlphaComposite.c with dst = (255, 255, 255, 255): blend = 255 * (255 - a), outa255 = 255 * 255,
  // so coef1 = a << 7 exactly; SHIFTFORDIV255 is its division by 255.
  constexpr uint32_t kBits = 7;
  for (size_t i = 0; i < pixels; ++i) {
    const uint32_t a = rgba[i * 4 + 3];
    for (int c = 0; c < 3; ++c) {
      if (a == 0) {
        rgb[i * 3 + c] = 255;
        continue;
      }
      const uint32_t coef1 = a * 255 * 255 * (1u << kBits) / (255 * 255);
      const uint32_t coef2 = 255 * (1u << kBits) - coef1;
      const uint32_t t = rgba[i * 4 + c] * coef1 + 255 * coef2 + (0x80u << kBits);
      rgb[i * 3 + c] = static_cast<uint8_t>((((t >> 8) + t) >> 8) >> kBits);
    }
  }
}

}  // namespace detail
}  // namespace fp4lm::vision
