#include "model/layers/activation.h"

#include <algorithm>
#include <cstdint>

#include "core/error.h"

namespace fp4lm::model {

void round_to_dtype(float* x, size_t n, DType t) {
  switch (t) {
    case DType::F32:
      return;
    case DType::BF16:
      for (size_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
      return;
    case DType::F16: {
      uint16_t buf[256];  // bulk conversions use F16C when the CPU has it
      for (size_t i = 0; i < n; i += 256) {
        size_t c = std::min<size_t>(256, n - i);
        f32_to_f16_n(x + i, buf, c);
        f16_to_f32_n(buf, x + i, c);
      }
      return;
    }
    default:
      fail("activation dtype must be float32, bfloat16 or float16, found {}", dtype_name(t));
  }
}

}  // namespace fp4lm::model
