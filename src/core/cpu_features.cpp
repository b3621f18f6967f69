#include "core/cpu_features.h"

#include <fstream>
#include <set>
#include <thread>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace fp4lm {

namespace {

#if defined(__x86_64__) || defined(__i386__)
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
#endif

// Physical cores from /proc/cpuinfo's (physical id, core id) pairs; falls back to logical.
int count_physical_cores(int logical) {
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<int, int>> cores;
  std::string line;
  int phys = 0;
  while (std::getline(in, line)) {
    auto value = [&] { return std::atoi(line.substr(line.find(':') + 1).c_str()); };
    if (line.rfind("physical id", 0) == 0) phys = value();
    if (line.rfind("core id", 0) == 0) cores.insert({phys, value()});
  }
  return cores.empty() ? logical : static_cast<int>(cores.size());
}

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    f.sse42 = c & bit_SSE4_2;
    bool osxsave = c & bit_OSXSAVE;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm = (xcr0 & 0x6) == 0x6;
    bool zmm = (xcr0 & 0xe6) == 0xe6;
    f.avx = ymm && (c & bit_AVX);
    f.fma = f.avx && (c & bit_FMA);
    f.f16c = f.avx && (c & bit_F16C);
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      f.avx2 = f.avx && (b & bit_AVX2);
      f.avx512f = zmm && (b & bit_AVX512F);
      f.avx512bw = f.avx512f && (b & bit_AVX512BW);
      f.avx512vl = f.avx512f && (b & bit_AVX512VL);
      f.avx512vbmi = f.avx512f && (c & bit_AVX512VBMI);
      f.avx512vnni = f.avx512f && (c & bit_AVX512VNNI);
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
      f.avx_vnni = f.avx2 && (a & (1u << 4));
      f.avx512bf16 = f.avx512f && (a & (1u << 5));
    }
  }
#endif
  f.logical_cores = std::max(1u, std::thread::hardware_concurrency());
  f.physical_cores = std::max(1, count_physical_cores(f.logical_cores));
  return f;
}

}  // namespace

std::string CpuFeatures::describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(sse42, "sse4.2");
  add(avx, "avx");
  add(avx2, "avx2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx_vnni, "avx-vnni");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512vbmi, "avx512vbmi");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  return s.empty() ? "none" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

}  // namespace fp4lm
