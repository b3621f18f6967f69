#include "model/layers/mrope_positions.h"

#include <algorithm>

#include "core/error.h"

namespace fp4lm::model {

int64_t image_run_tokens(const vision::GridThw& g, int64_t merge) {
  if (merge <= 0 || g.t <= 0 || g.h <= 0 || g.w <= 0 || g.h % merge != 0 || g.w % merge != 0)
    fail("image grid (t {}, h {}, w {}) is not a positive grid of whole {}x{} merge windows", g.t, g.h, g.w, merge,
         merge);
  return g.t * (g.h / merge) * (g.w / merge);
}

MropePositions mrope_positions(int64_t n, std::span<const ImageRun> runs, int64_t merge, int64_t start) {
  MropePositions out;
  out.thw.resize(static_cast<size_t>(3 * n));
  int64_t tok = 0, pos = start;
  auto text_until = [&](int64_t end) {
    for (; tok < end; ++tok, ++pos)
      for (int a = 0; a < 3; ++a) out.thw[static_cast<size_t>(3 * tok + a)] = pos;
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    const ImageRun& r = runs[i];
    const int64_t count = image_run_tokens(r.grid, merge);
    if (r.first < tok || r.first + count > n)
      fail("image {}: its {} placeholder tokens at [{}, {}) do not fit the prompt of {} tokens after the text before",
           i + 1, count, r.first, r.first + count, n);
    text_until(r.first);
    const int64_t gh = r.grid.h / merge, gw = r.grid.w / merge;
    for (int64_t f = 0; f < r.grid.t; ++f)
      for (int64_t y = 0; y < gh; ++y)
        for (int64_t x = 0; x < gw; ++x, ++tok) {
          int64_t* p = out.thw.data() + 3 * tok;
          p[0] = pos + f, p[1] = pos + y, p[2] = pos + x;
        }
    // Text resumes past the image's spatial extent (transformers advances by max(h, w) / merge
    // whatever t is: Qwen3.5 splits a video into one-frame grids first).
    pos += std::max(gh, gw);
  }
  text_until(n);
  int64_t mx = start - 1;
  for (int64_t v : out.thw) mx = std::max(mx, v);
  out.delta = mx + 1 - (start + n);
  return out;
}

}  // namespace fp4lm::model
