// The AVX-512 dense kernel table (ISA-neutral code, compiled without AVX-512 flags): BF16
// weight segments run the vdpbf16ps kernel (dense.cpp; its two-FMA form on a CPU without
// AVX512-BF16); F32 and F16 segments (whose values bf16 cannot hold exactly) run the AVX2 kernel
// on the same call. The prepared input holds both forms of x.
#include "kernels/cpu/dense_kernels.h"

#ifdef FP4LM_HAVE_AVX512_KERNELS

#include <algorithm>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/avx2/dense.h"
#include "kernels/cpu/avx512/dense.h"

namespace fp4lm::kernels::cpu {

namespace {

// vdpbf16ps, or its AVX-512F form on a CPU without AVX512-BF16 (Ice Lake; dense.h): decided
// once, so every call of the process packs and multiplies the same way (batch invariance).
bool native_bf16() {
  static const bool has = cpu_features().has(CpuFeature::avx512bf16);
  return has;
}

struct alignas(64) Line {
  uint8_t bytes[64];
};

struct Input final : PreparedInput {
  int pieces = 1;
  std::vector<Line> bf16;  // avx512::dense_pack_token layout, per token
  std::vector<float> f32;  // dense_input layout (for the AVX2 kernel's segments)
};

std::unique_ptr<PreparedInput> input(const void* x, DType act, int64_t m, int64_t k) {
  auto in = std::make_unique<Input>();
  in->m = m;
  in->pieces = act == DType::BF16 ? 1 : act == DType::F16 ? 2 : 3;
  in->f32 = dense_input(x, act, m, k);
  const int64_t words = avx512::dense_token_words(k, in->pieces, native_bf16()), stride = (k + 7) / 8 * 8;
  in->bf16.resize(static_cast<size_t>(m * words / 32));
  for (int64_t t = 0; t < m; ++t)
    avx512::dense_pack_token(in->f32.data() + t * stride, k, in->pieces,
                             reinterpret_cast<uint16_t*>(in->bf16.data()) + t * words, native_bf16());
  return in;
}

int64_t row_block(int64_t, int64_t) { return kDenseRowBlock; }

void rows(const DenseMatrix& w, const PreparedInput& pin, int64_t r0, int64_t r1, void* y, DType act) {
  const auto& in = static_cast<const Input&>(pin);
  for (const DenseSegment& s : w.segments) {
    const int64_t a = std::max(r0, s.row0), b = std::min(r1, s.row0 + s.rows);
    if (a >= b) continue;
    if (s.dtype == DType::BF16)
      avx512::dense_bf16_rows(reinterpret_cast<const uint16_t*>(s.data), s.row0, w.n, w.k,
                              w.bias.empty() ? nullptr : w.bias.data(),
                              reinterpret_cast<const uint16_t*>(in.bf16.data()), in.m, in.pieces, a, b, y, act, native_bf16());
    else
      dense_rows_avx2(w, in.f32.data(), in.m, a, b, y, act);
  }
}

constexpr DenseKernels kTable{"avx512", input, row_block, rows};

}  // namespace

const DenseKernels& dense_kernels_avx512() { return kTable; }

}  // namespace fp4lm::kernels::cpu

#else  // built without the AVX-512 kernels: an empty table its backends never call

namespace fp4lm::kernels::cpu {
const DenseKernels& dense_kernels_avx512() {
  static constexpr DenseKernels kNone{};
  return kNone;
}
}  // namespace fp4lm::kernels::cpu

#endif
