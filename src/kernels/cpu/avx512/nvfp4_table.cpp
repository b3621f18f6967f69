// The AVX-512 NVFP4 kernel table (ISA-neutral code, compiled without AVX-512 flags): the
// prepared activations (allocation, conversion, W4A4 quantization, the thread pool) around the
// raw-pointer kernels of nvfp4_w4a16*.cpp / nvfp4_w4a4*.cpp.
#include "kernels/cpu/nvfp4_kernels.h"

#ifdef FP4LM_HAVE_AVX512_KERNELS

#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/avx2/nvfp4.h"
#include "kernels/cpu/avx512/nvfp4.h"
#include "quant/nvfp4.h"

namespace fp4lm::kernels::cpu {

namespace {

struct alignas(64) Line {
  uint8_t bytes[64];
};

avx512::Rows rows_of(const Nvfp4Matrix& w) {
  return {w.row_codes.data(), w.row_scales.data(), w.row_global.data(), w.bias.empty() ? nullptr : w.bias.data(),
          w.n, w.k};
}

// The W4A16 kernels' BF16 instructions, or their AVX-512F form on a CPU without AVX512-BF16 (Ice
// Lake; nvfp4.h): decided once, so every call of the process packs and multiplies the same way.
bool native_bf16() {
  static const bool has = cpu_features().has(CpuFeature::avx512bf16);
  return has;
}

// W4A16: x as 1 (bf16), 2 (f16) or 3 (f32) bf16 pieces whose sum is x exactly.
int pieces_for(DType act) { return act == DType::BF16 ? 1 : act == DType::F16 ? 2 : 3; }

struct A16Input final : PreparedInput {
  int pieces = 1;
  std::vector<Line> x;
};

std::unique_ptr<PreparedInput> a16_input(const void* x, DType act, int64_t m, int64_t k, ThreadPool& pool) {
  auto in = std::make_unique<A16Input>();
  in->m = m;
  in->pieces = pieces_for(act);
  const int64_t words = avx512::w4a16_token_words(k, in->pieces);  // a multiple of 32
  in->x.resize(static_cast<size_t>(m * words / 32));
  auto* out = reinterpret_cast<uint16_t*>(in->x.data());
  const size_t es = dtype_size(act);
  pool.parallel_for(m, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> row(static_cast<size_t>(k));
    for (int64_t t = t0; t < t1; ++t) {
      to_f32_n(static_cast<const uint8_t*>(x) + t * k * es, act, row.data(), row.size());
      avx512::w4a16_pack_token(row.data(), k, in->pieces, out + t * words, native_bf16());
    }
  });
  return in;
}

void a16_rows(const Nvfp4Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  const auto& a = static_cast<const A16Input&>(in);
  avx512::w4a16_rows(rows_of(w), reinterpret_cast<const uint16_t*>(a.x.data()), a.m, a.pieces, r0, r1, y, act,
                     native_bf16());
}

// The GEMM table's W4A16 input: packed for w4a16_gemm_rows from kW4a16GemmMinTokens tokens,
// for w4a16_rows below (nvfp4_w4a16_gemm.cpp).
std::unique_ptr<PreparedInput> a16_gemm_input(const void* x, DType act, int64_t m, int64_t k, ThreadPool& pool) {
  if (m < avx512::kW4a16GemmMinTokens) return a16_input(x, act, m, k, pool);
  auto in = std::make_unique<A16Input>();
  in->m = m;
  in->pieces = pieces_for(act);
  in->x.resize(static_cast<size_t>(avx512::w4a16_gemm_input_words(m, k, in->pieces, native_bf16()) / 32));  // zeroed
  auto* out = reinterpret_cast<uint16_t*>(in->x.data());
  const size_t es = dtype_size(act);
  pool.parallel_for(m, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> row(static_cast<size_t>(k));
    std::vector<Line> scratch(static_cast<size_t>(avx512::w4a16_token_words(k, in->pieces) / 32));
    for (int64_t t = t0; t < t1; ++t) {
      to_f32_n(static_cast<const uint8_t*>(x) + t * k * es, act, row.data(), row.size());
      avx512::w4a16_gemm_pack_token(row.data(), t, k, in->pieces, reinterpret_cast<uint16_t*>(scratch.data()), out,
                                    native_bf16());
    }
  });
  return in;
}

void a16_gemm_rows(const Nvfp4Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  const auto& a = static_cast<const A16Input&>(in);
  const auto* x = reinterpret_cast<const uint16_t*>(a.x.data());
  if (a.m >= avx512::kW4a16GemmMinTokens)
    avx512::w4a16_gemm_rows(rows_of(w), x, a.m, a.pieces, r0, r1, y, act, native_bf16());
  else
    avx512::w4a16_rows(rows_of(w), x, a.m, a.pieces, r0, r1, y, act, native_bf16());
}

struct A4Input final : PreparedInput {
  std::vector<Line> x;
  std::vector<float> token_scale;  // [m] the input_scale each token was quantized with
};

// `gemm`: packed for w4a4_gemm_rows (tiles of 6 tokens) instead of w4a4_rows.
std::unique_ptr<PreparedInput> a4_input_for(const void* x, DType act, int64_t m, int64_t k,
                                            std::optional<float> input_scale, ThreadPool& pool, bool gemm) {
  auto in = std::make_unique<A4Input>();
  in->m = m;
  in->token_scale.assign(static_cast<size_t>(m), input_scale.value_or(0.0f));
  const int64_t bytes = avx512::w4a4_token_bytes(k);  // a multiple of 64
  in->x.resize(static_cast<size_t>((gemm ? avx512::w4a4_gemm_input_bytes(m, k) : m * bytes) / 64));  // zeroed
  auto* out = reinterpret_cast<uint8_t*>(in->x.data());
  const size_t es = dtype_size(act);
  pool.parallel_for(m, [&](int64_t t0, int64_t t1, int) {
    const int64_t cnt = t1 - t0;
    std::vector<float> rows(static_cast<size_t>(cnt * k));
    std::vector<uint8_t> codes(static_cast<size_t>(cnt * k / 2)), scales(static_cast<size_t>(cnt * k / 16));
    to_f32_n(static_cast<const uint8_t*>(x) + t0 * k * es, act, rows.data(), rows.size());
    // The AVX2 quantizer: bit-identical to quant::quantize_activation (tested); throws on
    // non-finite x (the element index is relative to this thread's first token).
    if (input_scale) {
      quantize_activation_nvfp4_avx2(rows.data(), cnt, k, *input_scale, codes.data(), scales.data());
    } else {  // per token: its own scale
      for (int64_t i = 0; i < cnt; ++i) {
        const float s = quant::dynamic_activation_scale(rows.data() + i * k, k);
        in->token_scale[static_cast<size_t>(t0 + i)] = s;
        quantize_activation_nvfp4_avx2(rows.data() + i * k, 1, k, s, codes.data() + i * (k / 2),
                                       scales.data() + i * (k / 16));
      }
    }
    std::vector<Line> scratch(gemm ? static_cast<size_t>(bytes / 64) : 0);
    for (int64_t i = 0; i < cnt; ++i) {
      if (gemm)
        avx512::w4a4_gemm_pack_token(codes.data() + i * (k / 2), scales.data() + i * (k / 16), t0 + i, k,
                                     reinterpret_cast<uint8_t*>(scratch.data()), out);
      else
        avx512::w4a4_pack_token(codes.data() + i * (k / 2), scales.data() + i * (k / 16), k, out + (t0 + i) * bytes);
    }
  });
  return in;
}

std::unique_ptr<PreparedInput> a4_input(const void* x, DType act, int64_t m, int64_t k,
                                        std::optional<float> input_scale, ThreadPool& pool) {
  return a4_input_for(x, act, m, k, input_scale, pool, false);
}

void a4_rows(const Nvfp4Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  const auto& a = static_cast<const A4Input&>(in);
  avx512::w4a4_rows(rows_of(w), a.token_scale.data(), reinterpret_cast<const uint8_t*>(a.x.data()), a.m, r0, r1, y, act);
}

std::unique_ptr<PreparedInput> a4_gemm_input(const void* x, DType act, int64_t m, int64_t k,
                                             std::optional<float> input_scale, ThreadPool& pool) {
  return a4_input_for(x, act, m, k, input_scale, pool, m >= avx512::kW4a4GemmMinTokens);
}

void a4_gemm_rows(const Nvfp4Matrix& w, const PreparedInput& in, int64_t r0, int64_t r1, void* y, DType act) {
  const auto& a = static_cast<const A4Input&>(in);
  const auto* x = reinterpret_cast<const uint8_t*>(a.x.data());
  if (a.m >= avx512::kW4a4GemmMinTokens)
    avx512::w4a4_gemm_rows(rows_of(w), a.token_scale.data(), x, a.m, r0, r1, y, act);
  else
    avx512::w4a4_rows(rows_of(w), a.token_scale.data(), x, a.m, r0, r1, y, act);
}

constexpr Nvfp4Kernels kTable{"avx512", a16_input, avx512::w4a16_row_block, a16_rows,
                              a4_input, avx512::w4a4_row_block, a4_rows};
// The GEMM kernels from kW4a16GemmMinTokens / kW4a4GemmMinTokens tokens (the same bits).
constexpr Nvfp4Kernels kGemmTable{"avx512", a16_gemm_input, avx512::w4a16_gemm_row_block, a16_gemm_rows,
                                  a4_gemm_input, avx512::w4a4_gemm_row_block, a4_gemm_rows};

}  // namespace

void* avx512::thread_scratch(size_t bytes) {
  thread_local std::vector<Line> buffer;
  if (buffer.size() * sizeof(Line) < bytes) buffer.resize((bytes + sizeof(Line) - 1) / sizeof(Line));
  return buffer.data();
}

const Nvfp4Kernels& nvfp4_kernels_avx512() { return kTable; }
const Nvfp4Kernels& nvfp4_kernels_avx512_gemm() { return kGemmTable; }

}  // namespace fp4lm::kernels::cpu

#else  // built without the AVX-512 kernels: an empty table its backends never call

namespace fp4lm::kernels::cpu {
const Nvfp4Kernels& nvfp4_kernels_avx512() {
  static constexpr Nvfp4Kernels kNone{};
  return kNone;
}
const Nvfp4Kernels& nvfp4_kernels_avx512_gemm() { return nvfp4_kernels_avx512(); }
}  // namespace fp4lm::kernels::cpu

#endif
