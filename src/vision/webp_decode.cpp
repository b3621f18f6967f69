// WebP through libwebp (Debian's libwebp7): the still image (lossy or lossless) with its alpha
// composited onto white as transformers' convert_to_rgb; orientation from an EXIF chunk applied.
// An animated WebP is refused (Pillow would give its first frame; fp4lm says so instead of
// silently dropping the rest).
#include <cstring>
#include <vector>

#include <webp/decode.h>
#include <webp/demux.h>

#include "core/error.h"
#include "vision/exif_orientation.h"
#include "vision/image_codecs.h"

namespace fp4lm::vision::detail {

RgbImage decode_webp(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& name) {
  WebPBitstreamFeatures f;
  const VP8StatusCode st = WebPGetFeatures(bytes.data(), bytes.size(), &f);
  if (st != VP8_STATUS_OK) fail("{}: corrupt or truncated WebP (libwebp status {})", name, static_cast<int>(st));
  if (f.has_animation) fail("{}: animated WebP is not supported; expected a still image", name);
  check_dimensions(static_cast<uint64_t>(f.width), static_cast<uint64_t>(f.height), limits, name, "WebP");

  std::vector<uint8_t> exif;
  WebPData data{bytes.data(), bytes.size()};
  if (WebPDemuxer* demux = WebPDemux(&data)) {
    WebPChunkIterator it;
    if (WebPDemuxGetChunk(demux, "EXIF", 1, &it)) {
      exif.assign(it.chunk.bytes, it.chunk.bytes + it.chunk.size);
      WebPDemuxReleaseChunkIterator(&it);
    }
    WebPDemuxDelete(demux);
  }

  RgbImage img;
  img.width = f.width;
  img.height = f.height;
  const size_t n = static_cast<size_t>(f.width) * f.height;
  img.rgb.resize(n * 3);
  if (f.has_alpha) {
    std::vector<uint8_t> rgba(n * 4);
    if (!WebPDecodeRGBAInto(bytes.data(), bytes.size(), rgba.data(), rgba.size(), f.width * 4))
      fail("{}: corrupt or truncated WebP image data", name);
    composite_rgba_on_white(rgba.data(), img.rgb.data(), n);
  } else if (!WebPDecodeRGBInto(bytes.data(), bytes.size(), img.rgb.data(), img.rgb.size(), f.width * 3)) {
    fail("{}: corrupt or truncated WebP image data", name);
  }
  return apply_exif_orientation(std::move(img), exif_orientation(exif));
}

}  // namespace fp4lm::vision::detail
