// What bounds the AVX2 W4A16 row loop on this CPU (docs/KERNELS.md, "Known gaps"), in thread CPU
// time and in cycles at --ghz (the CPU's clock while busy; measure it with the first line):
//  1. instruction mixes in inline asm: `vpmaddwd`, FMAs and `vmulps` alone and together, and the
//     loop's per (row, token, 64-element chunk) mix without its loads and decode (and the W4A4
//     loop's, avx2/nvfp4_w4a4_rows.h);
//  2. the loop itself (avx2/nvfp4_w4a16_rows.h) on L1/L2-resident rows for 1-12 tokens.
//   avx2_loop_bench [--ghz 3.2] [--k 2048] [--rows 24]
// Built with the AVX2 kernels' flags; it says so and exits on a CPU without AVX2, FMA and F16C.

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#define FP4LM_W4A16_DOT 0
#include "kernels/cpu/avx2/nvfp4_w4a16_rows.h"
#include "bench_clock.h"

namespace {

using namespace fp4lm::kernels::cpu;

// One asm body per row: its name and the cycles per iteration (best of 3). Registers 2-15 are
// destinations; each FMA/`vmulps` writes its own register, so the 8-chain FMA rows are
// throughput-bound (latency 4 × 8 chains), not latency-bound.
#define MADD(r) "vpmaddwd %%ymm0, %%ymm1, %%ymm" #r "\n\t"
#define FMA(r) "vfmadd231ps %%ymm0, %%ymm1, %%ymm" #r "\n\t"
#define MUL(r) "vmulps %%ymm0, %%ymm1, %%ymm" #r "\n\t"
#define CVT(r) "vcvtdq2ps %%ymm0, %%ymm" #r "\n\t"
#define ADD(r) "vpaddd %%ymm0, %%ymm1, %%ymm" #r "\n\t"
// W4A4's per (row, token, chunk) arithmetic (avx2/nvfp4_w4a4_rows.h): 2 vpmaddubsw, vpaddw,
// vpmaddwd, the correction's vpmovsxwd and vpaddd, the conversion, the scale product, the FMA.
#define W4A4(r)                                                                                        \
  "vpmaddubsw %%ymm0, %%ymm1, %%ymm2\n\tvpmaddubsw %%ymm0, %%ymm1, %%ymm3\n\tvpaddw %%ymm2, %%ymm3, %%ymm2\n\t" \
  "vpmaddwd %%ymm0, %%ymm2, %%ymm2\n\tvpmovsxwd %%xmm1, %%ymm4\n\tvpaddd %%ymm4, %%ymm2, %%ymm2\n\t"             \
  "vcvtdq2ps %%ymm2, %%ymm2\n\tvmulps %%ymm0, %%ymm1, %%ymm5\n\tvfmadd231ps %%ymm2, %%ymm5, %%ymm" #r "\n\t"
#define CLOBBER "rax", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15"
#define MIX(name, body)                                                     \
  {                                                                         \
    double best = 1e30;                                                     \
    for (int rep = 0; rep < 3; ++rep) {                                     \
      const double t0 = thread_cpu_seconds();                               \
      for (long i = 0; i < kIters; ++i) __asm__ volatile(body ::: CLOBBER); \
      best = std::min(best, thread_cpu_seconds() - t0);                     \
    }                                                                       \
    std::printf("  %-52s %5.2f cycles\n", name, best * ghz * 1e9 / kIters); \
  }

void instruction_mixes(double ghz) {
  constexpr long kIters = 20000000;
  std::printf("1. instruction mixes, cycles per iteration:\n");
  MIX("4 dependent adds: the clock check, 4.00", "add $1, %%rax\n\tadd $1, %%rax\n\tadd $1, %%rax\n\tadd $1, %%rax\n\t")
  MIX("8 vpmaddwd", MADD(2) MADD(3) MADD(4) MADD(5) MADD(6) MADD(7) MADD(8) MADD(9))
  MIX("8 vfmadd (8 chains)", FMA(8) FMA(9) FMA(10) FMA(11) FMA(12) FMA(13) FMA(14) FMA(15))
  MIX("8 vpmaddwd + 8 vfmadd", MADD(2) MADD(3) MADD(4) MADD(5) MADD(2) MADD(3) MADD(4) MADD(5) FMA(8) FMA(9)
                                   FMA(10) FMA(11) FMA(12) FMA(13) FMA(14) FMA(15))
  MIX("16 vpmaddwd + 4 vfmadd + 4 vmulps", MADD(2) MADD(3) MADD(4) MADD(5) MADD(2) MADD(3) MADD(4) MADD(5)
                                               MADD(2) MADD(3) MADD(4) MADD(5) MADD(2) MADD(3) MADD(4) MADD(5)
                                                   FMA(8) FMA(9) FMA(10) FMA(11) MUL(6) MUL(7) MUL(12) MUL(13))
  MIX("the loop's 4 chunk-tokens: 16 madd 12 add 4 cvt 4 mul 4 fma",
      MADD(2) MADD(3) MADD(4) MADD(5) MADD(2) MADD(3) MADD(4) MADD(5) MADD(2) MADD(3) MADD(4) MADD(5) MADD(2)
          MADD(3) MADD(4) MADD(5) FMA(8) FMA(9) FMA(10) FMA(11) MUL(6) MUL(7) MUL(12) MUL(13) CVT(14) CVT(15)
              CVT(14) CVT(15) ADD(6) ADD(7) ADD(12) ADD(13) ADD(6) ADD(7) ADD(12) ADD(13) ADD(6) ADD(7) ADD(12)
                  ADD(13))
  MIX("W4A4's 4 chunk-tokens: 8 maddubs 4 addw 4 madd 4 movsx 4 add 4 cvt 4 mul 4 fma",
      W4A4(8) W4A4(9) W4A4(10) W4A4(11))
}

// The row loop (w4a16_rows: row blocks, token tiles of 4) over `rows` rows of k weights (random
// codes and scales) for m = 1, 2, 3, 4, 8 and 12 tokens.
void row_loop(double ghz, int64_t k, int64_t rows) {
  constexpr int kMaxTokens = 12;
  std::mt19937 rng(1);
  std::vector<uint8_t> codes(static_cast<size_t>(rows * k / 2)), scales(static_cast<size_t>(rows * k / 16));
  for (auto& c : codes) c = static_cast<uint8_t>(rng());
  for (auto& s : scales) s = static_cast<uint8_t>(0x30 + rng() % 16);
  std::vector<int16_t> q(static_cast<size_t>(kMaxTokens * k));
  for (auto& v : q) v = static_cast<int16_t>(static_cast<int>(rng() % 32768) - 16384);
  std::vector<float> sa(static_cast<size_t>(kMaxTokens * k / 8));
  for (auto& v : sa) v = 1.0f / static_cast<float>(1 << (rng() % 8));
  std::vector<const uint8_t*> code_rows, scale_rows;
  for (int64_t r = 0; r < rows; ++r) {
    code_rows.push_back(codes.data() + r * k / 2);
    scale_rows.push_back(scales.data() + r * k / 16);
  }
  std::vector<float> global(static_cast<size_t>(rows), 1.0f), y(static_cast<size_t>(kMaxTokens * rows));
  W4a16Rows a{code_rows.data(), scale_rows.data(), global.data(), nullptr, rows, k, q.data(), sa.data(), 0, k, 1};
  double sink = 0;
  std::printf("2. the W4A16 row loop, k %lld, %lld rows (%.0f KiB of codes), bf16-sized (1-piece) activations:\n",
              static_cast<long long>(k), static_cast<long long>(rows), static_cast<double>(rows * k / 2) / 1024.0);
  for (int m : {1, 2, 3, 4, 8, 12}) {
    a.m = m;
    const int64_t reps = std::max<int64_t>(1, 40000000 / (k * rows * m / 64));
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const double t0 = thread_cpu_seconds();
      for (int64_t i = 0; i < reps; ++i) {
        w4a16_rows(a, 0, rows, y.data(), fp4lm::DType::F32);
        sink += y[0];
      }
      best = std::min(best, thread_cpu_seconds() - t0);
    }
    const double chunk_tokens = static_cast<double>(reps) * rows * (k / 64) * m;
    std::printf("  m = %2d: %5.2f cycles per (row, token, 64-weight chunk), %5.1f G multiply-adds/s\n", m,
                best * ghz * 1e9 / chunk_tokens, chunk_tokens * 64 / best / 1e9);
  }
  if (sink == 0.123) std::printf("(%g)\n", sink);
}

}  // namespace

int main(int argc, char** argv) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") || !__builtin_cpu_supports("f16c")) {
    std::printf("avx2_loop_bench: this CPU lacks AVX2, FMA or F16C; nothing to measure\n");
    return 0;
  }
  double ghz = 3.2;
  int64_t k = 2048, rows = 24;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--ghz") ghz = std::atof(argv[i + 1]);
    else if (a == "--k") k = std::atoll(argv[i + 1]);
    else if (a == "--rows") rows = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: avx2_loop_bench [--ghz 3.2] [--k 2048] [--rows 24]\n");
      return 2;
    }
  }
  if (ghz <= 0 || k <= 0 || k % 64 != 0 || rows <= 0) {
    std::fprintf(stderr, "--ghz must be > 0, --k a positive multiple of 64, --rows > 0\n");
    return 2;
  }
  std::printf("cycles at %.2f GHz (the first row of 1. reads 4.00 when that is the clock)\n", ghz);
  instruction_mixes(ghz);
  row_loop(ghz, k, rows);
  return 0;
}
