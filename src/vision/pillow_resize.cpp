#include "vision/pillow_resize.h"

#include <cmath>
#include <vector>

#include "core/error.h"

namespace fp4lm::vision {
namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

double bilinear(double x) {
  if (x < 0.0) x = -x;
  if (x < 1.0) return 1.0 - x;
  return 0.0;
}

// Per output position: the first input index, the tap count and ksize fixed-point weights
// (precompute_coeffs + normalize_coeffs_8bpc).
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;
};

Coeffs precompute(int in_size, int out_size, PillowFilter filter) {
  double (*kernel)(double) = filter == PillowFilter::kBilinear ? bilinear : bicubic;
  const double kernel_support = filter == PillowFilter::kBilinear ? 1.0 : 2.0;
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = kernel_support * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = kernel((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      c.k[static_cast<size_t>(xx) * c.ksize + x] =
          v < 0 ? static_cast<int32_t>(-0.5 + v * (1 << kPrecisionBits)) : static_cast<int32_t>(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

inline uint8_t clip8(int32_t v) {
  const int32_t s = v >> kPrecisionBits;
  return static_cast<uint8_t>(s < 0 ? 0 : s > 255 ? 255 : s);
}

}  // namespace

RgbImage resize_bicubic_pillow(const RgbImage& in, int out_w, int out_h) {
  return resize_pillow(in, out_w, out_h, PillowFilter::kBicubic);
}

RgbImage resize_pillow(const RgbImage& in, int out_w, int out_h, PillowFilter filter) {
  if (out_w <= 0 || out_h <= 0 || in.width <= 0 || in.height <= 0)
    fail("resize: {}x{} to {}x{}: sizes must be positive", in.width, in.height, out_w, out_h);
  if (out_w == in.width && out_h == in.height) return in;  // Image.resize returns a copy
  const Coeffs h = precompute(in.width, out_w, filter);
  const Coeffs v = precompute(in.height, out_h, filter);
  const bool need_h = out_w != in.width, need_v = out_h != in.height;

  // Horizontal pass over the rows the vertical pass reads (ImagingResampleInner).
  const int y_first = v.first[0];
  const int y_last = v.first[out_h - 1] + v.count[out_h - 1];
  RgbImage tmp;
  const RgbImage* src = &in;
  int row_offset = 0;
  if (need_h) {
    tmp.width = out_w;
    tmp.height = need_v ? y_last - y_first : in.height;
    const int y0 = need_v ? y_first : 0;
    tmp.rgb.resize(static_cast<size_t>(tmp.width) * tmp.height * 3);
    for (int y = 0; y < tmp.height; ++y) {
      const uint8_t* row = &in.rgb[static_cast<size_t>(y + y0) * in.width * 3];
      uint8_t* out = &tmp.rgb[static_cast<size_t>(y) * out_w * 3];
      for (int xx = 0; xx < out_w; ++xx) {
        const int32_t* k = &h.k[static_cast<size_t>(xx) * h.ksize];
        const int xmin = h.first[xx];
        for (int c = 0; c < 3; ++c) {
          int32_t ss = 1 << (kPrecisionBits - 1);
          for (int x = 0; x < h.count[xx]; ++x) ss += row[(x + xmin) * 3 + c] * k[x];
          out[xx * 3 + c] = clip8(ss);
        }
      }
    }
    src = &tmp;
    row_offset = need_v ? y_first : 0;
  }
  if (!need_v) return need_h ? tmp : in;

  RgbImage out;
  out.width = src->width;
  out.height = out_h;
  out.rgb.resize(static_cast<size_t>(out.width) * out_h * 3);
  for (int yy = 0; yy < out_h; ++yy) {
    const int32_t* k = &v.k[static_cast<size_t>(yy) * v.ksize];
    const int ymin = v.first[yy] - row_offset;
    for (int x = 0; x < out.width; ++x) {
      for (int c = 0; c < 3; ++c) {
        int32_t ss = 1 << (kPrecisionBits - 1);
        for (int y = 0; y < v.count[yy]; ++y)
          ss += src->rgb[(static_cast<size_t>(y + ymin) * src->width + x) * 3 + c] * k[y];
        out.rgb[(static_cast<size_t>(yy) * out.width + x) * 3 + c] = clip8(ss);
      }
    }
  }
  return out;
}

}  // namespace fp4lm::vision
