#pragma once
// The dense AMX table's rows(): BF16 weight segments by the tile body (amx_gemm.h), other
// segments by a fallback table (or an Error naming the dtype when there is none). Templated on
// the tile implementation like the bodies.
#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cpu/amx_gemm.h"
#include "kernels/cpu/dense_kernels.h"

namespace fp4lm::kernels::cpu::amx {

template <class Tiles>
void dense_rows(const DenseMatrix& w, const PreparedInput& pin, int64_t r0, int64_t r1, void* y, DType act,
                const DenseKernels* fallback) {
  const auto& in = static_cast<const AmxInput&>(pin);
  for (const DenseSegment& s : w.segments) {
    const int64_t a = std::max(r0, s.row0), b = std::min(r1, s.row0 + s.rows);
    if (a >= b) continue;
    if (s.dtype == DType::BF16) {
      dense_bf16_rows<Tiles>(w, in, a, b, y, act);
    } else {
      if (!fallback || !in.fallback)
        fail("dense AMX kernel: {} weight rows [{}, {}) need the AVX-512 kernel, which this table lacks",
             dtype_torch_name(s.dtype), s.row0, s.row0 + s.rows);
      fallback->rows(w, *in.fallback, a, b, y, act);
    }
  }
}

}  // namespace fp4lm::kernels::cpu::amx
