#pragma once
// What the CPU we run on can do, detected once at run time (cpuid + xgetbv), for kernel dispatch.
#include <string>

namespace fp4lm {

struct CpuFeatures {
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512vbmi = false;  // vpermb, vpermi2b
  bool avx512vnni = false;  // vpdpbusd
  bool avx512bf16 = false;  // vdpbf16ps
  bool avx_vnni = false;
  int physical_cores = 1;  // best effort; at least 1
  int logical_cores = 1;

  std::string describe() const;  // "avx2 fma f16c", for logs and `fp4lm backends`
};

const CpuFeatures& cpu_features();

}  // namespace fp4lm
