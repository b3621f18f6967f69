// JPEG through libjpeg-turbo (Debian's libjpeg62-turbo), as Pillow's JpegDecode reads it: the
// library's default IDCT (islow) and fancy upsampling; grey expanded to RGB; CMYK / YCCK read as
// CMYK, inverted as Pillow always reads them (rawmode "CMYK;I", the Adobe convention), and converted with Pillow's
// cmyk2rgb; EXIF orientation from APP1 applied. libjpeg reports errors through longjmp, so
// nothing with a destructor lives between setjmp and the end of decoding.
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>

#include "core/error.h"
#include "vision/exif_orientation.h"
#include "vision/image_codecs.h"

namespace fp4lm::vision::detail {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg casts the pointer
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  int max_scans;
};

void on_error(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

// Of libjpeg's corrupt-data warnings, a premature end of the data is an error (Pillow: "image file
// is truncated"); the others (extraneous bytes before a marker, common in camera files) are
// ignored, as Pillow decodes those files.
void on_warning(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) on_error(cinfo);
}

// Counts progressive scans; a file with thousands of tiny scans re-runs the whole image per scan.
void on_progress(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > err->max_scans) {
    std::snprintf(err->message, sizeof err->message, "more than %d progressive scans", err->max_scans);
    longjmp(err->jump, 1);
  }
}

inline uint8_t muldiv255(uint32_t a, uint32_t b) {
  const uint32_t t = a * b + 128;
  return static_cast<uint8_t>(((t >> 8) + t) >> 8);
}

struct Decoded {
  int width = 0, height = 0, components = 0;
  bool cmyk_inverted = false;
  std::vector<uint8_t> exif;
};

// Returns false with err.message set on a libjpeg error. `pixels` is allocated after the header
// check, by `allocate`, outside the setjmp frame's locals.
bool run(jpeg_decompress_struct& cinfo, ErrorManager& err, jpeg_progress_mgr& progress, std::span<const uint8_t> bytes,
         const ImageLimits& limits, const std::string& name, Decoded& out, std::vector<uint8_t>& pixels) {
  if (setjmp(err.jump)) return false;
  jpeg_create_decompress(&cinfo);
  cinfo.progress = &progress;  // after create, which clears every field but err
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);
  check_dimensions(cinfo.image_width, cinfo.image_height, limits, name, "JPEG");  // throws before any longjmp
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    cinfo.out_color_space = JCS_CMYK;
    out.cmyk_inverted = true;
  } else {
    cinfo.out_color_space = JCS_RGB;
  }
  for (auto* m = cinfo.marker_list; m; m = m->next) {
    if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0) {
      out.exif.assign(m->data, m->data + m->data_length);
      break;
    }
  }
  jpeg_start_decompress(&cinfo);
  out.width = static_cast<int>(cinfo.output_width);
  out.height = static_cast<int>(cinfo.output_height);
  out.components = cinfo.output_components;
  pixels.resize(static_cast<size_t>(out.width) * out.height * out.components);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pixels.data() + static_cast<size_t>(cinfo.output_scanline) * out.width * out.components;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  return true;
}

}  // namespace

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits, const std::string& name) {
  jpeg_decompress_struct cinfo{};
  ErrorManager err{};
  err.max_scans = limits.max_jpeg_scans;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = on_error;
  err.pub.emit_message = on_warning;
  jpeg_progress_mgr progress{};
  progress.progress_monitor = on_progress;
  Decoded d;
  std::vector<uint8_t> pixels;
  bool ok;
  try {
    ok = run(cinfo, err, progress, bytes, limits, name, d, pixels);
  } catch (...) {
    jpeg_destroy_decompress(&cinfo);
    throw;
  }
  jpeg_destroy_decompress(&cinfo);
  if (!ok) fail("{}: corrupt or truncated JPEG: {}", name, err.message);

  RgbImage img;
  img.width = d.width;
  img.height = d.height;
  const size_t n = static_cast<size_t>(d.width) * d.height;
  if (d.components == 3) {
    img.rgb = std::move(pixels);
  } else if (d.components == 4) {  // Pillow's cmyk2rgb
    img.rgb.resize(n * 3);
    for (size_t i = 0; i < n; ++i) {
      uint8_t cmyk[4];
      for (int c = 0; c < 4; ++c) cmyk[c] = d.cmyk_inverted ? 255 - pixels[i * 4 + c] : pixels[i * 4 + c];
      const uint32_t nk = 255 - cmyk[3];
      for (int c = 0; c < 3; ++c) img.rgb[i * 3 + c] = static_cast<uint8_t>(nk - muldiv255(cmyk[c], nk));
    }
  } else {
    fail("{}: JPEG decoded to {} components; expected 3 (RGB) or 4 (CMYK)", name, d.components);
  }
  return apply_exif_orientation(std::move(img), exif_orientation(d.exif));
}

}  // namespace fp4lm::vision::detail
