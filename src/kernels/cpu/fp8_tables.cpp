// The FP8 W8A16 kernel tables (ISA-neutral code: compiled without AVX-512 flags): the call's
// input in fp32, the adapters from the table's Fp8Matrix to the raw-pointer row kernels, and
// the panels' thread-local scratch.
#include <algorithm>
#include <atomic>
#include <vector>

#include "kernels/cpu/fp8_kernels.h"

namespace fp4lm::kernels::cpu {

namespace {

// ---- AVX2: x in fp32, rows of stride round_up(k, 32), zero-padded.
struct Fp32Input final : PreparedInput {
  Fp8Input in;
};

std::unique_ptr<PreparedInput> fp32_input(const void* x, DType act, int64_t m, int64_t k) {
  auto in = std::make_unique<Fp32Input>();
  in->m = m;
  in->in = fp8_input(x, act, m, k);
  return in;
}

Fp8Rows rows_of(const Fp8Matrix& w) {
  return {w.row_codes.data(), w.row_scale256.data(), w.bias.empty() ? nullptr : w.bias.data(), w.n, w.k};
}

void avx2_rows(const Fp8Matrix& w, const PreparedInput& pin, int64_t r0, int64_t r1, void* y, DType act) {
  const Fp8Input& x = static_cast<const Fp32Input&>(pin).in;
  fp8_w8a16_rows_avx2(rows_of(w), x.x.data(), x.kp, x.m, r0, r1, y, act);
}

// ---- Block-wise FP8 (Fp8Matrix::block_k > 0): the row kernels take one x per call, so for each
// run of rows that share a row of block scales the call's fp32 x is multiplied by those scales
// (x'[j] = x[j] × s[j / block_k], one fp32 rounding) and the rows run on x' with scale 1. A
// thread prepares each x' once per call (its rows are contiguous, so about n / block_n / threads
// times); the AVX-512 kernels then take x' as bf16 pieces, as many as hold it exactly
// (fp8_block_pieces: 3 for any fp32 x', 2 for bf16 x and bf16-exact scales, 1 for bf16 x and
// power-of-two scales).
struct BlockInput final : PreparedInput {
  Fp8Input in;
  uint64_t call = 0;  // tells the thread-local scaled copies of different calls apart
};

std::unique_ptr<PreparedInput> block_input(const void* x, DType act, int64_t m, int64_t k) {
  static std::atomic<uint64_t> calls{0};
  auto in = std::make_unique<BlockInput>();
  in->m = m;
  in->in = fp8_input(x, act, m, k);
  in->call = ++calls;
  return in;
}

// This thread's x' for (call, scales): fp32 rows of stride kp.
const float* scaled_x(const BlockInput& in, const float* scales, int64_t block_k, bool& fresh) {
  struct Cache {
    uint64_t call = 0;
    const float* scales = nullptr;
    std::vector<float> x;
  };
  thread_local Cache c;
  fresh = !(c.call == in.call && c.scales == scales);
  if (!fresh) return c.x.data();
  const Fp8Input& f = in.in;
  c.x.resize(f.x.size());
  for (int64_t t = 0; t < f.m; ++t) {
    const float* src = f.x.data() + t * f.kp;
    float* dst = c.x.data() + t * f.kp;
    for (int64_t b0 = 0, b = 0; b0 < f.k; b0 += block_k, ++b) {  // one scale per column block: no division
      const float s = scales[b];
      const int64_t b1 = std::min(f.k, b0 + block_k);
      for (int64_t j = b0; j < b1; ++j) dst[j] = src[j] * s;
    }
    for (int64_t j = f.k; j < f.kp; ++j) dst[j] = 0.0f;  // the padding
  }
  c.call = in.call;
  c.scales = scales;
  return c.x.data();
}

// Calls run(s0, s1, x') for each run [s0, s1) of rows in [r0, r1) sharing one row of scales.
template <class Run>
void for_each_scale_run(const Fp8Matrix& w, const BlockInput& in, int64_t r0, int64_t r1, Run&& run) {
  for (int64_t s0 = r0; s0 < r1;) {
    const float* scales = w.row_block_scales[static_cast<size_t>(s0)];
    int64_t s1 = s0 + 1;
    while (s1 < r1 && w.row_block_scales[static_cast<size_t>(s1)] == scales) ++s1;
    bool fresh = false;
    const float* xs = scaled_x(in, scales, w.block_k, fresh);
    run(s0, s1, xs, fresh);
    s0 = s1;
  }
}

void avx2_block_rows(const Fp8Matrix& w, const PreparedInput& pin, int64_t r0, int64_t r1, void* y, DType act) {
  const auto& in = static_cast<const BlockInput&>(pin);
  for_each_scale_run(w, in, r0, r1, [&](int64_t s0, int64_t s1, const float* xs, bool) {
    fp8_w8a16_rows_avx2(rows_of(w), xs, in.in.kp, in.m, s0, s1, y, act);
  });
}

#ifdef FP4LM_HAVE_AVX512_KERNELS
// ---- AVX-512: x as bf16 pieces (1 for bf16, 2 for f16, 3 for f32), per token in the
// decoder's order (fp8_avx512_pack_token), 64-byte aligned.
struct alignas(64) Line {
  uint16_t words[32];
};
struct PiecesInput final : PreparedInput {
  int pieces = 1;
  int64_t tstride = 0;  // words per token
  std::vector<Line> x;
};

std::unique_ptr<PreparedInput> pieces_input(const void* x, DType act, int64_t m, int64_t k) {
  auto in = std::make_unique<PiecesInput>();
  in->m = m;
  in->pieces = act == DType::BF16 ? 1 : act == DType::F16 ? 2 : 3;
  in->tstride = fp8_avx512_token_words(k, in->pieces);
  const Fp8Input f32 = fp8_input(x, act, m, k);
  in->x.resize(static_cast<size_t>(m * in->tstride / 32));
  for (int64_t t = 0; t < m; ++t)
    fp8_avx512_pack_token(f32.x.data() + t * f32.kp, k, in->pieces,
                          reinterpret_cast<uint16_t*>(in->x.data()) + t * in->tstride);
  return in;
}

void avx512_rows(const Fp8Matrix& w, const PreparedInput& pin, int64_t r0, int64_t r1, void* y, DType act) {
  const auto& in = static_cast<const PiecesInput&>(pin);
  fp8_w8a16_rows_avx512(rows_of(w), reinterpret_cast<const uint16_t*>(in.x.data()), in.tstride, in.pieces, in.m, r0,
                        r1, y, act);
}

void avx512_block_rows(const Fp8Matrix& w, const PreparedInput& pin, int64_t r0, int64_t r1, void* y, DType act) {
  const auto& in = static_cast<const BlockInput&>(pin);
  const int kPieces = fp8_block_pieces(act, w.scale_bits);  // exact: x' has at most 8 × kPieces bits
  const int64_t tstride = fp8_avx512_token_words(w.k, kPieces);
  thread_local std::vector<Line> packed;
  for_each_scale_run(w, in, r0, r1, [&](int64_t s0, int64_t s1, const float* xs, bool fresh) {
    if (fresh) {
      packed.resize(static_cast<size_t>(in.m * tstride / 32));
      for (int64_t t = 0; t < in.m; ++t)
        fp8_avx512_pack_token(xs + t * in.in.kp, w.k, kPieces, reinterpret_cast<uint16_t*>(packed.data()) + t * tstride);
    }
    fp8_w8a16_rows_avx512(rows_of(w), reinterpret_cast<const uint16_t*>(packed.data()), tstride, kPieces, in.m, s0,
                          s1, y, act);
  });
}
#endif

}  // namespace

const Fp8Kernels& fp8_kernels_avx2() {
  static constexpr Fp8Kernels kTable{"avx2", fp32_input, fp8_w8a16_row_block_avx2, avx2_rows};
  return kTable;
}

const Fp8Kernels& fp8_kernels_avx512() {
#ifdef FP4LM_HAVE_AVX512_KERNELS
  static constexpr Fp8Kernels kTable{"avx512", pieces_input, fp8_w8a16_row_block_avx512, avx512_rows};
#else
  static constexpr Fp8Kernels kTable{"avx512", nullptr, nullptr, nullptr};
#endif
  return kTable;
}

const Fp8Kernels& fp8_block_kernels_avx2() {
  static constexpr Fp8Kernels kTable{"avx2", block_input, fp8_w8a16_row_block_avx2, avx2_block_rows};
  return kTable;
}

const Fp8Kernels& fp8_block_kernels_avx512() {
#ifdef FP4LM_HAVE_AVX512_KERNELS
  static constexpr Fp8Kernels kTable{"avx512", block_input, fp8_w8a16_row_block_avx512, avx512_block_rows};
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
