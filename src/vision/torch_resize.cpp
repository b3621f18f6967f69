#include "vision/torch_resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/error.h"

namespace fp4lm::vision {
namespace {

// The cubic convolution kernel with a = -0.5, written as torch's aa filter evaluates it (the same
// operation order, so the double weights agree to the last bit).
double cubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2.0) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0.0;
}

struct Axis {
  std::vector<int64_t> first, count;  // per output index: the first input index and how many taps
  std::vector<int32_t> weights;       // per output index: `taps` int16 weights (the unused ones 0)
  int64_t taps = 0;
  int precision = 0;
};

// One axis's taps: PIL's support and centring (align_corners false, no explicit scale), each
// window's weights normalized in double, then rounded to integers at the shared precision.
Axis make_axis(int64_t in, int64_t out) {
  Axis a;
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double support = scale >= 1.0 ? 2.0 * scale : 2.0;
  a.taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
  std::vector<double> w(static_cast<size_t>(out * a.taps), 0.0);
  a.first.resize(static_cast<size_t>(out));
  a.count.resize(static_cast<size_t>(out));
  double wmax = 0.0;
  for (int64_t i = 0; i < out; ++i) {
    const double center = scale * (static_cast<double>(i) + 0.5);
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t n = std::clamp<int64_t>(std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in) - lo, 0,
                                          a.taps);
    double* wi = w.data() + i * a.taps;
    double total = 0.0;
    for (int64_t j = 0; j < n; ++j) {
      wi[j] = cubic((static_cast<double>(j + lo) - center + 0.5) * invscale);
      total += wi[j];
    }
    if (total != 0.0)
      for (int64_t j = 0; j < n; ++j) {
        wi[j] /= total;
        wmax = std::max(wmax, wi[j]);
      }
    a.first[static_cast<size_t>(i)] = lo;
    a.count[static_cast<size_t>(i)] = n;
  }
  int p = 0;
  for (; p < 22; ++p)
    if (static_cast<int>(0.5 + wmax * static_cast<double>(1 << (p + 1))) >= (1 << 15)) break;
  a.precision = p;
  a.weights.resize(w.size());
  for (size_t k = 0; k < w.size(); ++k) {
    const double v = w[k] * static_cast<double>(1 << p);
    a.weights[k] = static_cast<int16_t>(v < 0 ? static_cast<int>(-0.5 + v) : static_cast<int>(0.5 + v));
  }
  return a;
}

uint8_t clamp8(int64_t v) { return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255)); }

}  // namespace

RgbImage resize_bicubic_torch_aa(const RgbImage& in, int out_width, int out_height) {
  if (in.width <= 0 || in.height <= 0 || out_width <= 0 || out_height <= 0)
    fail("resize of a {}x{} image to {}x{}: every side must be positive", in.width, in.height, out_width, out_height);
  if (out_width == in.width && out_height == in.height) return in;
  RgbImage cur = in;
  if (out_width != in.width) {  // horizontal pass first, as torch (and Pillow)
    const Axis ax = make_axis(in.width, out_width);
    RgbImage o{out_width, cur.height, std::vector<uint8_t>(static_cast<size_t>(out_width) * cur.height * 3)};
    const int64_t half = int64_t{1} << (ax.precision - 1);
    for (int y = 0; y < cur.height; ++y)
      for (int x = 0; x < out_width; ++x) {
        const int32_t* wx = ax.weights.data() + x * ax.taps;
        const int64_t lo = ax.first[static_cast<size_t>(x)], n = ax.count[static_cast<size_t>(x)];
        for (int c = 0; c < 3; ++c) {
          int64_t s = half;
          for (int64_t j = 0; j < n; ++j) s += int64_t{cur.at(y, static_cast<int>(lo + j), c)} * wx[j];
          o.rgb[(static_cast<size_t>(y) * out_width + x) * 3 + c] = clamp8(s >> ax.precision);
        }
      }
    cur = std::move(o);
  }
  if (out_height != in.height) {
    const Axis ax = make_axis(in.height, out_height);
    RgbImage o{cur.width, out_height, std::vector<uint8_t>(static_cast<size_t>(cur.width) * out_height * 3)};
    const int64_t half = int64_t{1} << (ax.precision - 1);
    for (int y = 0; y < out_height; ++y) {
      const int32_t* wy = ax.weights.data() + y * ax.taps;
      const int64_t lo = ax.first[static_cast<size_t>(y)], n = ax.count[static_cast<size_t>(y)];
      for (int x = 0; x < cur.width; ++x)
        for (int c = 0; c < 3; ++c) {
          int64_t s = half;
          for (int64_t j = 0; j < n; ++j) s += int64_t{cur.at(static_cast<int>(lo + j), x, c)} * wy[j];
          o.rgb[(static_cast<size_t>(y) * cur.width + x) * 3 + c] = clamp8(s >> ax.precision);
        }
    }
    cur = std::move(o);
  }
  return cur;
}

}  // namespace fp4lm::vision
