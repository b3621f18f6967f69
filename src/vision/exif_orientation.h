#pragma once
// EXIF orientation (tag 0x0112 of IFD0) and Pillow's ImageOps.exif_transpose of it, which
// transformers' load_image applies before anything else.
#include <cstdint>
#include <span>

#include "vision/image.h"

namespace fp4lm::vision {

// The orientation 1..8 in a TIFF-structured EXIF block (starting at "II*\0" / "MM\0*", or with the
// "Exif\0\0" prefix of a JPEG APP1 segment); 1 when absent, malformed or out of range.
int exif_orientation(std::span<const uint8_t> exif);

// The image turned upright for `orientation` (2..8: mirror / rotate as exif_transpose does).
RgbImage apply_exif_orientation(RgbImage image, int orientation);

}  // namespace fp4lm::vision
