// PNG through libpng (Debian's libpng16), to the bytes Pillow's PngImagePlugin + convert("RGB")
// give: palette and low-bit grey expanded; 16-bit RGB(A) reduced to the high byte (Pillow's
// "RGB;16B" unpacker); 16-bit grey clamped to 255 (Pillow's "I;16" -> "L" conversion clips);
// alpha, a palette's tRNS or a colour key composited onto white as transformers' convert_to_rgb;
// orientation from an eXIf chunk applied. Only the first frame of an APNG (its default image).
// libpng reports errors through longjmp: nothing with a destructor lives in the setjmp frame.
#include <cstdio>
#include <cstring>
#include <vector>

#include <png.h>

#include "core/error.h"
#include "vision/exif_orientation.h"
#include "vision/image_codecs.h"

namespace fp4lm::vision::detail {
namespace {

struct Reader {
  std::span<const uint8_t> bytes;
  size_t at = 0;
  char message[256] = "";
};

void on_read(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<Reader*>(png_get_io_ptr(png));
  if (n > r->bytes.size() - r->at) png_error(png, "truncated file");
  std::memcpy(out, r->bytes.data() + r->at, n);
  r->at += n;
}

void on_error(png_structp png, png_const_charp msg) {
  auto* r = static_cast<Reader*>(png_get_error_ptr(png));
  std::snprintf(r->message, sizeof r->message, "%s", msg);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}

struct Decoded {
  uint32_t width = 0, height = 0;
  int channels = 0;      // after the transforms: 1 grey (16-bit: 2 bytes), 2 grey+alpha, 3 RGB, 4 RGBA
  bool grey16 = false;   // 16-bit grey without alpha: kept 16-bit to clamp as Pillow does
  std::vector<uint8_t> exif;
};

bool run(png_structp png, png_infop info, Reader& reader, const ImageLimits& limits, const std::string& name,
         Decoded& out, std::vector<uint8_t>& pixels) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, &reader, on_read);
  png_set_user_limits(png, 0x7fffffffu, 0x7fffffffu);  // check_dimensions decides, with its message
  png_set_chunk_malloc_max(png, 8u << 20);  // one ancillary chunk (text, ICC, eXIf) at most 8 MiB
  png_read_info(png, info);
  png_uint_32 w, h;
  int depth, color, interlace;
  png_get_IHDR(png, info, &w, &h, &depth, &color, &interlace, nullptr, nullptr);
  check_dimensions(w, h, limits, name, "PNG");  // throws before any longjmp
  out.width = w;
  out.height = h;
  const bool has_trns = png_get_valid(png, info, PNG_INFO_tRNS);
  const bool grey = !(color & PNG_COLOR_MASK_COLOR) && color != PNG_COLOR_TYPE_PALETTE;
  out.grey16 = grey && depth == 16 && !(color & PNG_COLOR_MASK_ALPHA) && !has_trns;
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (grey && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (has_trns) png_set_tRNS_to_alpha(png);
  if (depth == 16) {
    if (out.grey16) png_set_swap(png);  // little-endian 16-bit values
    else png_set_strip_16(png);          // the high byte, as Pillow's 16-bit unpackers
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const size_t rowbytes = png_get_rowbytes(png, info);
  out.channels = png_get_channels(png, info);
  pixels.resize(rowbytes * h);
  for (int pass = interlace != PNG_INTERLACE_NONE ? 7 : 1; pass > 0; --pass) {
    for (png_uint_32 y = 0; y < h; ++y) png_read_row(png, pixels.data() + rowbytes * y, nullptr);
  }
  // Pillow stops quietly at a bad or missing chunk after the image data (a file without IEND
  // decodes there), so a libpng error from here on keeps the pixels.
  if (setjmp(png_jmpbuf(png))) return true;
  png_read_end(png, info);
  return true;
}

}  // namespace

RgbImage decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& name) {
  Reader reader;
  reader.bytes = bytes;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &reader, on_error, on_warning);
  if (!png) fail("{}: cannot start libpng", name);
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    fail("{}: cannot start libpng", name);
  }
  Decoded d;
  std::vector<uint8_t> pixels;
  bool ok;
  try {
    ok = run(png, info, reader, limits, name, d, pixels);
  } catch (...) {
    png_destroy_read_struct(&png, &info, nullptr);
    throw;
  }
  png_bytep exif = nullptr;  // an eXIf chunk before or after the image data
  png_uint_32 exif_len = 0;
  if (ok && png_get_eXIf_1(png, info, &exif_len, &exif) && exif && exif_len) d.exif.assign(exif, exif + exif_len);
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) fail("{}: corrupt or truncated PNG: {}", name, reader.message);

  RgbImage img;
  img.width = static_cast<int>(d.width);
  img.height = static_cast<int>(d.height);
  const size_t n = static_cast<size_t>(d.width) * d.height;
  img.rgb.resize(n * 3);
  std::vector<uint8_t> rgba;
  switch (d.channels) {
    case 1:
      for (size_t i = 0; i < n; ++i) {
        uint8_t v = pixels[i];
        if (d.grey16) {
          const uint32_t v16 = pixels[2 * i] | pixels[2 * i + 1] << 8;
          v = static_cast<uint8_t>(v16 > 255 ? 255 : v16);
        }
        img.rgb[i * 3] = img.rgb[i * 3 + 1] = img.rgb[i * 3 + 2] = v;
      }
      break;
    case 2:
      rgba.resize(n * 4);
      for (size_t i = 0; i < n; ++i) {
        rgba[i * 4] = rgba[i * 4 + 1] = rgba[i * 4 + 2] = pixels[i * 2];
        rgba[i * 4 + 3] = pixels[i * 2 + 1];
      }
      composite_rgba_on_white(rgba.data(), img.rgb.data(), n);
      break;
    case 3: img.rgb = std::move(pixels); img.rgb.resize(n * 3); break;
    case 4: composite_rgba_on_white(pixels.data(), img.rgb.data(), n); break;
    default: fail("{}: PNG decoded to {} channels; expected 1 to 4", name, d.channels);
  }
  return apply_exif_orientation(std::move(img), exif_orientation(d.exif));
}

}  // namespace fp4lm::vision::detail
