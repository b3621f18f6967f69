// The bare-instruction peak of the compute-bound kernels' multiply instructions on one core, in
// thread CPU time (robust on a shared machine): 12 independent accumulator chains of
//   vdpbf16ps zmm (32 bf16 multiply-adds into 16 fp32 lanes: 64 FLOP),
//   vpdpbusd  zmm (64 u8·s8 multiply-adds into 16 int32 lanes: 128 OP),
//   vfmadd231ps zmm (16 fp32 FMAs: 32 FLOP),
// register operands only, no loads. The ratio of a kernel's per-core GFLOP/s (kernel_core_bench)
// to the first is how close it runs to the ISA's peak (docs/BENCHMARKS.md, "Compute peak").
//
//   bf16_peak_bench     prints G instructions/s and GFLOP/s (GOP/s) per core for each, and the
//                       W4A16 block structure's vdpbf16ps rate (block_loop)
// Each loop runs only where the CPU has the feature; otherwise it prints why it skipped.
#include <cstdint>
#include <cstdio>

#include "core/cpu_features.h"
#include "bench_clock.h"

namespace {

constexpr long kIters = 20'000'000;  // × 12 instructions per loop

#define FP4LM_PEAK_LOOP(name, insn, target_attr)                                                   \
  __attribute__((target(target_attr), noinline)) void name(long iters) {                         \
    asm volatile(                                                                                \
        "vpxord %%zmm0, %%zmm0, %%zmm0\n\t"                                                      \
        "vmovdqa64 %%zmm0, %%zmm1\n\tvmovdqa64 %%zmm0, %%zmm2\n\tvmovdqa64 %%zmm0, %%zmm3\n\t"   \
        "vmovdqa64 %%zmm0, %%zmm4\n\tvmovdqa64 %%zmm0, %%zmm5\n\tvmovdqa64 %%zmm0, %%zmm6\n\t"   \
        "vmovdqa64 %%zmm0, %%zmm7\n\tvmovdqa64 %%zmm0, %%zmm8\n\tvmovdqa64 %%zmm0, %%zmm9\n\t"   \
        "vmovdqa64 %%zmm0, %%zmm10\n\tvmovdqa64 %%zmm0, %%zmm11\n\t"                             \
        "1:\n\t" insn " %%zmm12, %%zmm13, %%zmm0\n\t" insn " %%zmm12, %%zmm13, %%zmm1\n\t" insn    \
        " %%zmm12, %%zmm13, %%zmm2\n\t" insn " %%zmm12, %%zmm13, %%zmm3\n\t" insn                  \
        " %%zmm12, %%zmm13, %%zmm4\n\t" insn " %%zmm12, %%zmm13, %%zmm5\n\t" insn                  \
        " %%zmm12, %%zmm13, %%zmm6\n\t" insn " %%zmm12, %%zmm13, %%zmm7\n\t" insn                  \
        " %%zmm12, %%zmm13, %%zmm8\n\t" insn " %%zmm12, %%zmm13, %%zmm9\n\t" insn                  \
        " %%zmm12, %%zmm13, %%zmm10\n\t" insn " %%zmm12, %%zmm13, %%zmm11\n\t"                     \
        "dec %0\n\tjnz 1b\n\t"                                                                   \
        : "+r"(iters)                                                                            \
        :                                                                                        \
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9",       \
          "xmm10", "xmm11", "xmm12", "xmm13", "cc");                                             \
  }

FP4LM_PEAK_LOOP(dpbf16_loop, "vdpbf16ps", "avx512f,avx512bf16")

// The AVX-512 W4A16 kernels' block structure in registers: per 16-element block and (row, token)
// a partial zeroed, 8 vdpbf16ps into it, then one vfmadd231ps by the block scale (12 chains), so
// 96 vdpbf16ps + 12 FMAs share the FP pipes: the ceiling of any kernel computing W4A16's bits.
__attribute__((target("avx512f,avx512bf16"), noinline)) void block_loop(long iters) {
  asm volatile(
      "vpxord %%zmm12, %%zmm12, %%zmm12\n\t"
      "1:\n\t"
      ".irp i,0,1,2,3,4,5,6,7,8,9,10,11\n\t vpxord %%zmm\\i, %%zmm\\i, %%zmm\\i\n\t .endr\n\t"
      ".rept 8\n\t .irp i,0,1,2,3,4,5,6,7,8,9,10,11\n\t vdpbf16ps %%zmm13, %%zmm14, %%zmm\\i\n\t .endr\n\t .endr\n\t"
      ".irp i,0,1,2,3,4,5,6,7,8,9,10,11\n\t vfmadd231ps %%zmm15, %%zmm\\i, %%zmm12\n\t .endr\n\t"
      "dec %0\n\tjnz 1b\n\t"
      : "+r"(iters)
      :
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
        "xmm13", "xmm14", "xmm15", "cc");
}
FP4LM_PEAK_LOOP(dpbusd_loop, "vpdpbusd", "avx512f,avx512vnni")
FP4LM_PEAK_LOOP(fma_loop, "vfmadd231ps", "avx512f")

// insns_per_iter: the multiply instructions one loop iteration runs.
void measure(const char* name, void (*loop)(long), double ops_per_insn, long iters = kIters, double insns_per_iter = 12) {
  double best = 1e30;
  for (int round = 0; round < 5; ++round) {
    const double t0 = thread_cpu_seconds();
    loop(iters);
    const double t = thread_cpu_seconds() - t0;
    if (t < best) best = t;
  }
  const double insns = insns_per_iter * iters;
  std::printf("%-12s %6.2f G insn/s per core  %7.1f G%s/s per core\n", name, insns / best / 1e9,
              insns * ops_per_insn / best / 1e9, ops_per_insn == 128 ? "OP" : "FLOP");
}

}  // namespace

int main() {
  using fp4lm::CpuFeature;
  const auto& cpu = fp4lm::cpu_features();
  std::printf("1 thread, 12 independent zmm chains, register operands, best of 5, thread CPU time\n");
  if (cpu.has(CpuFeature::avx512bf16)) {
    measure("vdpbf16ps", dpbf16_loop, 64);
    measure("W4A16 block", block_loop, 64, kIters / 8, 96);  // counts the vdpbf16ps only
  } else {
    std::printf("vdpbf16ps    skipped: CPU lacks avx512bf16\n");
  }
  if (cpu.has(CpuFeature::avx512vnni)) measure("vpdpbusd", dpbusd_loop, 128);
  else std::printf("vpdpbusd     skipped: CPU lacks avx512vnni\n");
  if (cpu.has(CpuFeature::avx512f)) measure("vfmadd231ps", fma_loop, 32);
  else std::printf("vfmadd231ps  skipped: CPU lacks avx512f\n");
  return 0;
}
