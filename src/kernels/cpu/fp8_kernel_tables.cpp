// The FP8 W8A16 kernel tables (ISA-neutral code: compiled without AVX-512 flags): the call's
// input in fp32, the adapters from the table's Fp8Matrix to the raw-pointer row kernels, and
// the panels' thread-local scratch.
#include <vector>

#include "kernels/cpu/fp8_kernels.h"

namespace fp4lm::kernels::cpu {

namespace {

struct Fp8PreparedInput final : PreparedInput {
  Fp8Input in;
};

std::unique_ptr<PreparedInput> input(const void* x, DType act, int64_t m, int64_t k) {
  auto in = std::make_unique<Fp8PreparedInput>();
  in->m = m;
  in->in = fp8_input(x, act, m, k);
  return in;
}

using RowsFn = void (*)(const Fp8Rows&, const float*, int64_t, int64_t, int64_t, int64_t, void*, DType);

template <RowsFn Kernel>
void rows(const Fp8Matrix& w, const PreparedInput& pin, int64_t r0, int64_t r1, void* y, DType act) {
  const Fp8Input& x = static_cast<const Fp8PreparedInput&>(pin).in;
  const Fp8Rows r{w.row_codes.data(), w.row_scale256.data(), w.bias.empty() ? nullptr : w.bias.data(), w.n, w.k};
  Kernel(r, x.x.data(), x.kp, x.m, r0, r1, y, act);
}

}  // namespace

const Fp8Kernels& fp8_kernels_avx2() {
  static constexpr Fp8Kernels kTable{"avx2", input, fp8_w8a16_row_block_avx2, rows<fp8_w8a16_rows_avx2>};
  return kTable;
}

const Fp8Kernels& fp8_kernels_avx512() {
#ifdef FP4LM_HAVE_AVX512_KERNELS
  static constexpr Fp8Kernels kTable{"avx512", input, fp8_w8a16_row_block_avx512, rows<fp8_w8a16_rows_avx512>};
#else
  static constexpr Fp8Kernels kTable{"avx512", nullptr, nullptr, nullptr};
#endif
  return kTable;
}

void* fp8_thread_scratch(size_t bytes) {
  struct alignas(64) Line {
    unsigned char b[64];
  };
  thread_local std::vector<Line> buffer;
  if (buffer.size() * sizeof(Line) < bytes) buffer.resize((bytes + sizeof(Line) - 1) / sizeof(Line));
  return buffer.data();
}

}  // namespace fp4lm::kernels::cpu
