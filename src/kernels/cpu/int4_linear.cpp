// The int4 W4A16 Linear kernel and its tables (ISA-neutral code: compiled without AVX-512 flags).
#include <algorithm>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/int4_kernels.h"

namespace fp4lm::kernels::cpu {

namespace {
struct Int4Input final : PreparedInput {
  std::vector<std::vector<float>> x;   // per distinct permutation: [m, k] fp32 in the codes' column order
  std::vector<std::vector<float>> xs;  // chunk128: each x's chunk sums [m, k/8]
};
}  // namespace

Int4Linear::Int4Linear(LinearWeights w, const LinearProblem& p, const Int4Kernels& isa)
    : RowSplitLinear(w.n), w_(prepare_int4_matrix(std::move(w))), act_(p.act_dtype), isa_(isa) {
  if (act_ != DType::F32 && act_ != DType::BF16 && act_ != DType::F16)
    fail("int4 CPU kernel: activation dtype {} is not float32, bfloat16 or float16", dtype_torch_name(act_));
  if (!isa_.rows) fail("int4 CPU kernel: the {} kernels were not built", isa_.isa);
  if (p.n != w_.n || p.k != w_.k)
    fail("int4 CPU kernel: problem shape [{}, {}] differs from the weights' [{}, {}]", p.n, p.k, w_.n, w_.k);
  chunk128_ = isa_.chunk128 && w_.k % 128 == 0 && (w_.group % 128 == 0 || 128 % w_.group == 0);
  if (chunk128_) {
    // x'[c·128 + 16t + L] = x[perm[c·128 + 8L + t]]: the order the 128-column decode yields weights in.
    for (std::vector<int32_t>& perm : w_.perms) {
      std::vector<int32_t> in = perm;
      if (in.empty()) {
        in.resize(static_cast<size_t>(w_.k));
        for (int64_t j = 0; j < w_.k; ++j) in[static_cast<size_t>(j)] = static_cast<int32_t>(j);
      }
      perm.resize(static_cast<size_t>(w_.k));
      for (int64_t c = 0; c < w_.k; c += 128)
        for (int t = 0; t < 8; ++t)
          for (int L = 0; L < 16; ++L) perm[static_cast<size_t>(c + 16 * t + L)] = in[static_cast<size_t>(c + 8 * L + t)];
    }
  }
}

std::unique_ptr<PreparedInput> Int4Linear::prepare(const void* x, int64_t m, bool, ThreadPool&) const {
  if (m < 0) fail("int4 CPU kernel: negative token count {}", m);
  auto in = std::make_unique<Int4Input>();
  in->m = m;
  for (const std::vector<int32_t>& perm : w_.perms) {
    in->x.push_back(int4_input(x, act_, m, w_.k, perm));
    if (chunk128_) in->xs.push_back(int4_chunk_sums(in->x.back(), m, w_.k));
  }
  return in;
}

void Int4Linear::run_rows(const PreparedInput& pin, int64_t r0, int64_t r1, void* y) const {
  const auto& in = static_cast<const Int4Input&>(pin);
  const Int4Rows rows = int4_rows_view(w_, chunk128_);
  // Each shard's rows with the x gathered by its own permutation.
  for (size_t i = 0; i < w_.shard_end.size() && r0 < r1; ++i) {
    if (r0 >= w_.shard_end[i]) continue;
    const int64_t end = std::min(r1, w_.shard_end[i]);
    const size_t p = static_cast<size_t>(w_.shard_perm[i]);
    isa_.rows(rows, in.x[p].data(), chunk128_ ? in.xs[p].data() : nullptr, in.m, r0, end, y, act_);
    r0 = end;
  }
}

const Int4Kernels& int4_kernels_avx2() {
#ifdef FP4LM_HAVE_AVX2_KERNELS
  static constexpr Int4Kernels kTable{"avx2", int4_w4a16_row_block_avx2, int4_w4a16_rows_avx2};
#else
  static constexpr Int4Kernels kTable{"avx2", nullptr, nullptr};
#endif
  return kTable;
}

const Int4Kernels& int4_kernels_avx512() {
#ifdef FP4LM_HAVE_AVX512_KERNELS
  static constexpr Int4Kernels kTable{"avx512", int4_w4a16_row_block_avx512, int4_w4a16_rows_avx512, true};
#else
  static constexpr Int4Kernels kTable{"avx512", nullptr, nullptr};
#endif
  return kTable;
}

void* int4_thread_scratch(size_t bytes) {
  struct alignas(64) Line {
    unsigned char b[64];
  };
  thread_local std::vector<Line> buffer;
  if (buffer.size() * sizeof(Line) < bytes) buffer.resize((bytes + sizeof(Line) - 1) / sizeof(Line));
  return buffer.data();
}

}  // namespace fp4lm::kernels::cpu
