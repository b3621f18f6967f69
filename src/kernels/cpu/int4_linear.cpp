// The int4 W4A16 Linear kernel and its tables (ISA-neutral code: compiled without AVX-512 flags).
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/error.h"
#include "kernels/cpu/int4_kernels.h"
#ifdef FP4LM_HAVE_AVX2_KERNELS
#include "kernels/cpu/avx2/nvfp4.h"
#endif
#ifdef FP4LM_HAVE_AVX512_KERNELS
#include "kernels/cpu/avx512/nvfp4.h"
#endif

namespace fp4lm::kernels::cpu {

namespace {
struct Int4Input final : PreparedInput {
  std::vector<std::vector<float>> x;   // per distinct permutation: [m, k] fp32 in the codes' column order
};

// The repacked kernels' input, per distinct permutation: AVX-512, x as bf16 pieces (xp) and the
// 16-column sums (xs16, asymmetric layers); AVX2, x quantized to int16 blocks (q, sa).
struct alignas(64) Line {
  uint16_t w[32];
};
struct Int4PackedInput final : PreparedInput {
  int pieces = 1;
  std::vector<std::vector<Line>> xp;
  std::vector<std::vector<float>> xs16;
#ifdef FP4LM_HAVE_AVX2_KERNELS
  std::vector<W4a16Input> q;
#endif
};

// x [m, k] in `act` gathered by perm (x'[j] = x[perm[j]]), in `act` (no rounding).
std::vector<uint8_t> gather_act(const void* x, DType act, int64_t m, int64_t k, const std::vector<int32_t>& perm) {
  const size_t es = dtype_size(act);
  std::vector<uint8_t> out(static_cast<size_t>(m * k) * es);
  const auto* in = static_cast<const uint8_t*>(x);
  for (int64_t t = 0; t < m; ++t)
    for (int64_t j = 0; j < k; ++j)
      std::memcpy(out.data() + static_cast<size_t>(t * k + j) * es,
                  in + static_cast<size_t>(t * k + perm[static_cast<size_t>(j)]) * es, es);
  return out;
}
}  // namespace

Int4Linear::Int4Linear(LinearWeights w, const LinearProblem& p, const Int4Kernels& isa)
    : RowSplitLinear(w.n), w_(prepare_int4_matrix(std::move(w))), act_(p.act_dtype), isa_(isa) {
  if (act_ != DType::F32 && act_ != DType::BF16 && act_ != DType::F16)
    fail("int4 CPU kernel: activation dtype {} is not float32, bfloat16 or float16", dtype_torch_name(act_));
  if (!isa_.packed_chunk) fail("int4 CPU kernel: the {} kernels were not built", isa_.isa);
  if (p.n != w_.n || p.k != w_.k)
    fail("int4 CPU kernel: problem shape [{}, {}] differs from the weights' [{}, {}]", p.n, p.k, w_.n, w_.k);
  if (isa_.packed_chunk == 256 || (isa_.packed_chunk == 64 && w_.group % 32 == 0)) {
    packed_chunk_ = isa_.packed_chunk;
    packed_ = pack_int4(w_, packed_chunk_);
    native_bf16_ = cpu_features().has(CpuFeature::avx512bf16);
    // Only the permutations, shard bounds and bias of w_ are used from here on.
    std::vector<uint8_t>().swap(w_.codes);
    std::vector<float>().swap(w_.scales);
    std::vector<float>().swap(w_.zeros);
    return;
  }
  if (!isa_.rows) fail("int4 CPU kernel: the {} kernels take no group of {} columns", isa_.isa, w_.group);
}

int64_t Int4Linear::row_block(int64_t m) const {
#ifdef FP4LM_HAVE_AVX512_KERNELS
  if (packed_chunk_ == 256) return int4_bf16_row_block_avx512(m, w_.k);
#endif
#ifdef FP4LM_HAVE_AVX2_KERNELS
  if (packed_chunk_ == 64) return int4_int16_row_block_avx2(m, w_.k);
#endif
  return isa_.row_block(m, w_.k);
}

std::unique_ptr<PreparedInput> Int4Linear::prepare(const void* x, int64_t m, bool, ThreadPool& pool) const {
  if (m < 0) fail("int4 CPU kernel: negative token count {}", m);
  if (packed_chunk_) {
    auto in = std::make_unique<Int4PackedInput>();
    in->m = m;
    const int64_t k = w_.k, kp = packed_.kp;
    for (const std::vector<int32_t>& perm : w_.perms) {
#ifdef FP4LM_HAVE_AVX512_KERNELS
      if (packed_chunk_ == 256) {
        in->pieces = act_ == DType::BF16 ? 1 : act_ == DType::F16 ? 2 : 3;
        const std::vector<float> xf = int4_input(x, act_, m, k, perm);
        const int64_t words = avx512::w4a16_token_words(k, in->pieces);
        std::vector<Line>& xp = in->xp.emplace_back(static_cast<size_t>(m * words / 32));
        std::vector<float>& xs = in->xs16.emplace_back();
        if (!packed_.symmetric) xs.assign(static_cast<size_t>(m * kp / 16), 0.0f);
        pool.parallel_for(m, [&](int64_t t0, int64_t t1, int) {
          for (int64_t t = t0; t < t1; ++t) {
            avx512::w4a16_pack_token(xf.data() + t * k, k, in->pieces, xp[static_cast<size_t>(t * words / 32)].w,
                                     native_bf16_);
            if (xs.empty()) continue;
            for (int64_t b = 0; b < k / 16; ++b) {  // each 16 columns' sum, in a fixed order
              const float* p = xf.data() + t * k + b * 16;
              float s = p[0];
              for (int i = 1; i < 16; ++i) s += p[i];
              xs[static_cast<size_t>(t * kp / 16 + b)] = s;
            }
          }
        });
        continue;
      }
#endif
#ifdef FP4LM_HAVE_AVX2_KERNELS
      if (act_ != DType::BF16) {
        // f16 (11 significant bits) would lose bits below 2^-4 of its block's largest in one
        // int16 piece: f16 and f32 take the two-piece (30-bit) form.
        const std::vector<float> xf = int4_input(x, act_, m, k, perm);
        in->q.push_back(nvfp4_w4a16_input_avx2(xf.data(), DType::F32, m, k, pool));
      } else if (perm.empty()) {
        in->q.push_back(nvfp4_w4a16_input_avx2(x, act_, m, k, pool));
      } else {
        const std::vector<uint8_t> g = gather_act(x, act_, m, k, perm);
        in->q.push_back(nvfp4_w4a16_input_avx2(g.data(), act_, m, k, pool));
      }
#else
      (void)pool;
      (void)kp;
      fail("int4 CPU kernel: the AVX2 kernels were not built");
#endif
    }
    return in;
  }
  auto in = std::make_unique<Int4Input>();
  in->m = m;
  for (const std::vector<int32_t>& perm : w_.perms) in->x.push_back(int4_input(x, act_, m, w_.k, perm));
  return in;
}

void Int4Linear::run_rows(const PreparedInput& pin, int64_t r0, int64_t r1, void* y) const {
  if (packed_chunk_) {
    const auto& in = static_cast<const Int4PackedInput&>(pin);
    const Int4PackedRows rows = int4_packed_rows(packed_, w_.bias.empty() ? nullptr : w_.bias.data());
    for (size_t i = 0; i < w_.shard_end.size() && r0 < r1; ++i) {
      if (r0 >= w_.shard_end[i]) continue;
      const int64_t end = std::min(r1, w_.shard_end[i]);
      const size_t p = static_cast<size_t>(w_.shard_perm[i]);
#ifdef FP4LM_HAVE_AVX512_KERNELS
      if (packed_chunk_ == 256)
        int4_bf16_rows_avx512(rows, in.xp[p].empty() ? nullptr : in.xp[p].data()->w,
                              in.xs16[p].empty() ? nullptr : in.xs16[p].data(), in.m, in.pieces, r0, end, y, act_,
                              native_bf16_);
#endif
#ifdef FP4LM_HAVE_AVX2_KERNELS
      if (packed_chunk_ == 64)
        int4_int16_rows_avx2(rows, packed_.group, in.q[p].q.data(), in.q[p].sa.data(), in.q[p].pieces, in.m, r0,
                             end, y, act_);
#endif
      r0 = end;
    }
    return;
  }
  const auto& in = static_cast<const Int4Input&>(pin);
  const Int4Rows rows = int4_rows_view(w_);
  // Each shard's rows with the x gathered by its own permutation.
  for (size_t i = 0; i < w_.shard_end.size() && r0 < r1; ++i) {
    if (r0 >= w_.shard_end[i]) continue;
    const int64_t end = std::min(r1, w_.shard_end[i]);
    const size_t p = static_cast<size_t>(w_.shard_perm[i]);
    isa_.rows(rows, in.x[p].data(), in.m, r0, end, y, act_);
    r0 = end;
  }
}

const Int4Kernels& int4_kernels_avx2() {
#ifdef FP4LM_HAVE_AVX2_KERNELS
  static constexpr Int4Kernels kTable{"avx2", 64, int4_w4a16_row_block_avx2, int4_w4a16_rows_avx2};
#else
  static constexpr Int4Kernels kTable{"avx2"};
#endif
  return kTable;
}

const Int4Kernels& int4_kernels_avx512() {
#ifdef FP4LM_HAVE_AVX512_KERNELS
  static constexpr Int4Kernels kTable{"avx512", 256};
#else
  static constexpr Int4Kernels kTable{"avx512"};
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
