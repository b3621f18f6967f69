#pragma once
// The per-format decoders behind decode_image (one file each); not part of the layer's interface.
#include <cstdint>
#include <span>
#include <string>

#include "vision/image.h"
#include "vision/image_decode.h"

namespace fp4lm::vision::detail {

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& name);
RgbImage decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& name);
RgbImage decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& name);

// Error unless width x height is within the limits (called before allocating pixels).
void check_dimensions(uint64_t width, uint64_t height, const ImageLimits& limits, const std::string& name,
                      const char* format);

// Pillow's Image.alpha_composite of `rgba` over opaque white, then RGB (AlphaComposite.c's
// fixed-point arithmetic, so the bytes equal transformers' convert_to_rgb).
void composite_rgba_on_white(const uint8_t* rgba, uint8_t* rgb, size_t pixels);

}  // namespace fp4lm::vision::detail
