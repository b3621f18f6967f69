// The AVX2 NVFP4 kernel table: adapters from the Nvfp4Kernels seam to nvfp4.h.
#include "core/cpu_features.h"
#include "kernels/cpu/avx2/nvfp4.h"
#include "kernels/cpu/nvfp4_kernels.h"

namespace fp4lm::kernels::cpu {

namespace {

struct A16Input final : PreparedInput {
  W4a16Input in;
};
struct A4Input final : PreparedInput {
  W4a4Input in;
};

std::unique_ptr<PreparedInput> a16_input(const void* x, DType act, int64_t m, int64_t k, ThreadPool& pool) {
  auto in = std::make_unique<A16Input>();
  in->m = m;
  in->in = nvfp4_w4a16_input_avx2(x, act, m, k, pool);
  return in;
}

// AVX-VNNI when the CPU has it (Intel client CPUs from Alder Lake): the same bits, 3 ops fewer
// per chunk and token (avx2/nvfp4_w4a16_rows.h; W4A4: 3, avx2/nvfp4_w4a4_rows.h).
void a16_rows(const Nvfp4Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  const W4a16Rows a = w4a16_rows_of(w, static_cast<const A16Input&>(in).in);
#ifdef FP4LM_HAVE_AVXVNNI_KERNELS
  static const bool vnni = cpu_features().has(CpuFeature::avx_vnni);
  if (vnni) return nvfp4_w4a16_rows_avxvnni(a, r0, r1, y, act);
#endif
  nvfp4_w4a16_rows_avx2(a, r0, r1, y, act);
}

std::unique_ptr<PreparedInput> a4_input(const void* x, DType act, int64_t m, int64_t k,
                                        std::optional<float> input_scale, ThreadPool& pool) {
  auto in = std::make_unique<A4Input>();
  in->m = m;
  in->in = nvfp4_w4a4_input_avx2(x, act, m, k, input_scale, pool);
  return in;
}

int64_t a4_row_block(int64_t, int64_t) { return kNvfp4RowBlock; }

void a4_rows(const Nvfp4Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  const W4a4Rows a = w4a4_rows_of(w, static_cast<const A4Input&>(in).in);
#ifdef FP4LM_HAVE_AVXVNNI_KERNELS
  static const bool vnni = cpu_features().has(CpuFeature::avx_vnni);
  if (vnni) return nvfp4_w4a4_rows_avxvnni(a, r0, r1, y, act);
#endif
  nvfp4_w4a4_rows_avx2(a, r0, r1, y, act);
}

constexpr Nvfp4Kernels kTable{"avx2", a16_input, nvfp4_w4a16_row_block_avx2, a16_rows,
                              a4_input, a4_row_block, a4_rows};

}  // namespace

W4a16Rows w4a16_rows_of(const Nvfp4Matrix& w, const W4a16Input& in) {
  return {w.row_codes.data(), w.row_scales.data(), w.row_global.data(), w.bias.empty() ? nullptr : w.bias.data(),
          w.n, w.k, in.q.data(), in.sa.data(), in.m, in.k64, in.pieces};
}

W4a4Rows w4a4_rows_of(const Nvfp4Matrix& w, const W4a4Input& in) {
  return {w.row_codes.data(), w.row_scales.data(), w.row_global.data(), w.bias.empty() ? nullptr : w.bias.data(),
          w.n, w.k, in.q.data(), in.sa.data(), in.corr.data(), in.token_scale.data(), in.m, in.k64};
}

const Nvfp4Kernels& nvfp4_kernels_avx2() { return kTable; }

}  // namespace fp4lm::kernels::cpu
