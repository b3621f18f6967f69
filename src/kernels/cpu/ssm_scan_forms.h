// The Mamba-2 scan (kernels/ssm_scan.h), written once and compiled once per instruction set:
// cpu/reference/ssm_scan.cpp (the build's baseline), cpu/avx2/ssm_scan.cpp (AVX2 + FMA) and
// cpu/avx512/ssm_scan.cpp (AVX-512), chosen at run time. Include only from those, with
// FP4LM_SSM_ISA naming the namespace and FP4LM_SSM_LANES the floats per vector register.
// Recurrent form: the state row S[p, :] is updated and dotted with C in one pass over N,
// FP4LM_SSM_LANES lanes at a time (GCC/Clang vector extension); the lanes are summed in a fixed
// order, so a row's result depends on nothing but its inputs and the state.
// Chunked (SSD) form: per block, dense products through one register-tiled kernel (gemm below);
// each output element is summed over k in order whatever the tiling, so a block's result depends
// on nothing but its rows and the state before it.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

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
// x in every lane (a scalar operand is broadcast; x − 0 is x, −0 included). A lane-by-lane loop
// here compiles at -O3 into masked inserts that dominated the chunked form's products.
inline Vec splat(float x) { return x - Vec{}; }
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

namespace {

// Tile shape of gemm: kMr rows × kNv vectors of columns, the accumulators in registers (32 for
// AVX-512, 16 for AVX2 and the SSE2 baseline).
constexpr int kNv = kLanes == 4 ? 4 : 2;
constexpr int kMr = kLanes == 16 ? 6 : kLanes == 8 ? 4 : 2;

template <int MR, int NV>
inline void gemm_tile(const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, int64_t K) {
  Vec acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NV; ++j) acc[r][j] = load(C + r * ldc + j * kLanes);
  for (int64_t k = 0; k < K; ++k) {
    Vec b[NV];
    for (int j = 0; j < NV; ++j) b[j] = load(B + k * ldb + j * kLanes);
    for (int r = 0; r < MR; ++r) {
      const Vec a = splat(A[r * lda + k]);
      for (int j = 0; j < NV; ++j) acc[r][j] += a * b[j];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int j = 0; j < NV; ++j) store(C + r * ldc + j * kLanes, acc[r][j]);
}

// C[M][N] += A[M][K]·B[K][N] (row-major, leading dimensions in floats). lower: A is lower
// triangular by rows (A[i][k] = 0 for k > i), so a row tile stops at its last row's k. Every
// element is summed over k in order from its value in C (the zeros past the diagonal add
// nothing), however the tiles fall.
void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
          int64_t ldc, bool lower) {
  constexpr int64_t wide = kNv * kLanes;
  auto k_of = [&](int64_t row_end) { return lower ? std::min(K, row_end) : K; };
  int64_t n = 0;
  for (; n + wide <= N; n += wide) {
    int64_t m = 0;
    for (; m + kMr <= M; m += kMr) gemm_tile<kMr, kNv>(A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, k_of(m + kMr));
    for (; m < M; ++m) gemm_tile<1, kNv>(A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, k_of(m + 1));
  }
  for (; n + kLanes <= N; n += kLanes) {
    int64_t m = 0;
    for (; m + kMr <= M; m += kMr) gemm_tile<kMr, 1>(A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, k_of(m + kMr));
    for (; m < M; ++m) gemm_tile<1, 1>(A + m * lda, lda, B + n, ldb, C + m * ldc + n, ldc, k_of(m + 1));
  }
  for (; n < N; ++n)  // columns past the last full vector
    for (int64_t m = 0; m < M; ++m) {
      float acc = C[m * ldc + n];
      for (int64_t k = 0; k < k_of(m + 1); ++k) acc += A[m * lda + k] * B[k * ldb + n];
      C[m * ldc + n] = acc;
    }
}

}  // namespace

void ssm_scan_chunked(const SsdRows& r, float* S) {
  const int64_t P = r.head_dim, N = r.state, L = r.chunk;
  std::vector<float> bt(static_cast<size_t>(N * L)), cb(static_cast<size_t>(L * L)), g(static_cast<size_t>(L * L)),
      ce(static_cast<size_t>(L * N)), st(static_cast<size_t>(N * P)), xw(static_cast<size_t>(P * L)),
      y(static_cast<size_t>(L * P)), dts(static_cast<size_t>(L)), et(static_cast<size_t>(L));
  std::vector<double> cum(static_cast<size_t>(L)), seg(static_cast<size_t>(L * L)), step(static_cast<size_t>(L));
  for (int64_t t0 = 0; t0 < r.n;) {
    const int64_t m = std::min(r.n - t0, L - (r.pos0 + t0) % L);  // this block's rows
    const float* B0 = r.b + t0 * r.bc_stride;
    const float* C0 = r.c + t0 * r.bc_stride;
    // C·Bᵀ [m, m], shared by the group's heads (only s ≤ t is read).
    for (int64_t s = 0; s < m; ++s)
      for (int64_t k = 0; k < N; ++k) bt[static_cast<size_t>(k * m + s)] = B0[s * r.bc_stride + k];
    std::fill(cb.begin(), cb.begin() + m * m, 0.0f);
    gemm(m, m, N, C0, r.bc_stride, bt.data(), m, cb.data(), m, false);
    for (int64_t h = 0; h < r.heads; ++h) {
      const double a = r.a[h];
      const float* X = r.x + t0 * r.x_stride + h * P;
      float* Sh = S + h * P * N;
      // γ_t (float64), e^{a_t}, and the segment decays D_ts = Π_{s<k≤t} e^{a_k} as running
      // products in float64 (row t = row t-1 · e^{a_t}), each ≤ 1.
      double acc = 0;
      for (int64_t t = 0; t < m; ++t) {
        const float dt = r.dt[(t0 + t) * r.dt_stride + h];
        dts[static_cast<size_t>(t)] = dt;
        step[static_cast<size_t>(t)] = std::exp(static_cast<double>(dt) * a);
        acc += static_cast<double>(dt) * a;
        cum[static_cast<size_t>(t)] = acc;
        et[static_cast<size_t>(t)] = static_cast<float>(std::exp(acc));
      }
      for (int64_t t = 0; t < m; ++t) {
        double* row = seg.data() + t * m;
        const double e = step[static_cast<size_t>(t)];
        for (int64_t s = 0; s < t; ++s) row[s] = row[s - m] * e;  // row t-1's D_{t-1,s}
        row[t] = 1.0;
        float* gr = g.data() + t * m;
        const float* cr = cb.data() + t * m;
        for (int64_t s = 0; s <= t; ++s) gr[s] = cr[s] * static_cast<float>(row[s]) * dts[static_cast<size_t>(s)];
        for (int64_t s = t + 1; s < m; ++s) gr[s] = 0.0f;
      }
      // Y = (D ∘ C·Bᵀ)·diag(dt)·X + diag(e^γ)·C·Sᵀ, then + D·x.
      std::fill(y.begin(), y.begin() + m * P, 0.0f);
      gemm(m, P, m, g.data(), m, X, r.x_stride, y.data(), P, true);
      for (int64_t t = 0; t < m; ++t)
        for (int64_t k = 0; k < N; ++k)
          ce[static_cast<size_t>(t * N + k)] = et[static_cast<size_t>(t)] * C0[t * r.bc_stride + k];
      for (int64_t p = 0; p < P; ++p)
        for (int64_t k = 0; k < N; ++k) st[static_cast<size_t>(k * P + p)] = Sh[p * N + k];
      gemm(m, P, N, ce.data(), N, st.data(), P, y.data(), P, false);
      const float dh = r.d[h];
      for (int64_t t = 0; t < m; ++t) {
        float* out = r.y + (t0 + t) * r.y_stride + h * P;
        const float* xt = X + t * r.x_stride;
        for (int64_t p = 0; p < P; ++p) out[p] = y[static_cast<size_t>(t * P + p)] + dh * xt[p];
      }
      // S ← e^{γ_last}·S + Xᵀ·diag(D_last,s·dt_s)·B.
      const float decay = et[static_cast<size_t>(m - 1)];
      for (int64_t i = 0; i < P * N; ++i) Sh[i] *= decay;
      const double* last = seg.data() + (m - 1) * m;
      for (int64_t s = 0; s < m; ++s) {
        const float w = static_cast<float>(last[s]) * dts[static_cast<size_t>(s)];
        const float* xs = X + s * r.x_stride;
        for (int64_t p = 0; p < P; ++p) xw[static_cast<size_t>(p * m + s)] = w * xs[p];
      }
      gemm(P, N, m, xw.data(), m, B0, r.bc_stride, Sh, N, false);
    }
    t0 += m;
  }
}

}  // namespace fp4lm::kernels::cpu::FP4LM_SSM_ISA
