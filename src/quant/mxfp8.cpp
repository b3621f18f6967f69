#include "quant/mxfp8.h"

#include <algorithm>
#include <cmath>

#include "core/dtype.h"
#include "core/error.h"

namespace fp4lm::quant {

int mxfp8_exponent(float amax) {
  const float d = amax / 448.0f;  // float32, as ModelOpt's amax.float() / E4M3_MAX
  if (!(d > 0.0f)) return -127;
  int e = 0;
  const float m = std::frexp(d, &e);  // d = m × 2^e, m in [0.5, 1)
  const int c = m == 0.5f ? e - 1 : e;  // ceil(log2 d): exact at powers of two
  return std::clamp(c, -127, 127);
}

void mxfp8_qdq_row(float* x, int64_t k) {
  if (k % kMxfp8Block != 0) fail("MXFP8 activations: k = {} is not a multiple of the 32-element block", k);
  for (int64_t b = 0; b < k; b += kMxfp8Block) {
    float amax = 0.0f;
    for (int64_t j = b; j < b + kMxfp8Block; ++j) {
      if (!std::isfinite(x[j])) fail("MXFP8 activations: element {} is {}", j, x[j]);
      amax = std::max(amax, std::fabs(x[j]));
    }
    const int e = mxfp8_exponent(amax);
    // 2^-e and 2^e are exact floats for |e| <= 127 (2^-127 is a subnormal); x × 2^-e is x / 2^e.
    const float inv = std::ldexp(1.0f, -e), s = std::ldexp(1.0f, e);
    for (int64_t j = b; j < b + kMxfp8Block; ++j)
      x[j] = e4m3_to_f32(f32_to_e4m3(std::clamp(x[j] * inv, -448.0f, 448.0f))) * s;
  }
}

}  // namespace fp4lm::quant
