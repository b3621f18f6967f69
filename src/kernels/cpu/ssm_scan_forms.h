// The Mamba-2 scan (kernels/ssm_scan.h), written once and compiled once per instruction set:
// cpu/reference/ssm_scan.cpp (the build's baseline), cpu/avx2/ssm_scan.cpp (AVX2 + FMA) and
// cpu/avx512/ssm_scan.cpp (AVX-512), chosen at run time. Include only from those, with
// FP4LM_SSM_ISA naming the namespace and FP4LM_SSM_LANES the floats per vector register.
// The state row S[p, :] is updated and dotted with C in one pass over N, FP4LM_SSM_LANES lanes at
// a time (GCC/Clang vector extension); the lanes are summed in a fixed order, so a row's result
// depends on nothing but its inputs and the state.
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/ssm_scan.h"

namespace fp4lm::kernels::cpu::FP4LM_SSM_ISA {

namespace {
constexpr int kLanes = FP4LM_SSM_LANES;
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, const Vec& v) { std::memcpy(p, &v, sizeof v); }
inline Vec splat(float x) {
  Vec v;
  for (int i = 0; i < kLanes; ++i) v[i] = x;
  return v;
}
}  // namespace

void ssm_scan(const SsmScanRows& r, float* S) {
  const int64_t P = r.head_dim, N = r.state, nv = N / kLanes * kLanes;
  for (int64_t t = 0; t < r.n; ++t) {
    const float dt = r.dt[t * r.dt_stride];
    const float* x = r.x + t * r.x_stride;
    const float* B = r.b + t * r.bc_stride;
    const float* C = r.c + t * r.bc_stride;
    float* y = r.y + t * r.y_stride;
    const float decay = std::exp(dt * r.a);
    const Vec vdecay = splat(decay);
    for (int64_t p = 0; p < P; ++p) {
      float* Sp = S + p * N;
      const float xs = dt * x[p];
      const Vec vxs = splat(xs);
      Vec acc = splat(0.0f);
      for (int64_t n = 0; n < nv; n += kLanes) {
        const Vec s = load(Sp + n) * vdecay + vxs * load(B + n);
        store(Sp + n, s);
        acc += s * load(C + n);
      }
      float sum = 0.0f;
      for (int i = 0; i < kLanes; ++i) sum += acc[i];
      for (int64_t n = nv; n < N; ++n) {
        const float s = Sp[n] * decay + xs * B[n];
        Sp[n] = s;
        sum += s * C[n];
      }
      y[p] = sum + r.d * x[p];
    }
  }
}

}  // namespace fp4lm::kernels::cpu::FP4LM_SSM_ISA
