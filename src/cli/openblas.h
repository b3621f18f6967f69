#pragma once
// OpenBLAS, the baseline `fp4lm bench kernels` measures the kernels against, loaded at run time
// by that command alone (dlopen): the production binary does not link it, and every other
// command runs on a machine without it.
#include <cblas.h>

namespace fp4lm::cli {

struct OpenBlas {
  decltype(&cblas_sgemm) sgemm = nullptr;
  void (*set_num_threads)(int) = nullptr;
  char* (*get_corename)() = nullptr;
  // cblas_sbgemm when this OpenBLAS was built with it (Debian's is not); else null.
  void (*sbgemm)(CBLAS_ORDER, CBLAS_TRANSPOSE, CBLAS_TRANSPOSE, blasint, blasint, blasint, float, const uint16_t*,
                 blasint, const uint16_t*, blasint, float, float*, blasint) = nullptr;
};

// The library, loaded on first call (libopenblas.so.0, then libopenblas.so); Error naming the
// library and the package to install when it is absent or lacks a function.
const OpenBlas& openblas();

}  // namespace fp4lm::cli
