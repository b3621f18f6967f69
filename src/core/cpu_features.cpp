#include "core/cpu_features.h"

#include <algorithm>
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
  CpuFeatureSet& s = f.features;
  auto set = [&](CpuFeature feature, bool on) {
    if (on) s.insert(feature);
  };
  unsigned a, b, c, d;
  if (__get_cpuid(1, &a, &b, &c, &d)) {
    set(CpuFeature::sse42, c & bit_SSE4_2);
    bool osxsave = c & bit_OSXSAVE;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    bool ymm = (xcr0 & 0x6) == 0x6;
    bool zmm = (xcr0 & 0xe6) == 0xe6;
    const bool avx = ymm && (c & bit_AVX);
    set(CpuFeature::avx, avx);
    set(CpuFeature::fma, avx && (c & bit_FMA));
    set(CpuFeature::f16c, avx && (c & bit_F16C));
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      const bool avx512f = zmm && (b & bit_AVX512F);
      set(CpuFeature::avx2, avx && (b & bit_AVX2));
      set(CpuFeature::avx512f, avx512f);
      set(CpuFeature::avx512bw, avx512f && (b & bit_AVX512BW));
      set(CpuFeature::avx512vl, avx512f && (b & bit_AVX512VL));
      set(CpuFeature::avx512vbmi, avx512f && (c & bit_AVX512VBMI));
      set(CpuFeature::avx512vnni, avx512f && (c & bit_AVX512VNNI));
      // AMX: CPUID.7.0:EDX bits 24 (tile), 22 (bf16), 25 (int8), usable only when the OS enabled
      // XTILECFG and XTILEDATA in XCR0 (bits 17, 18). Linux also wants a per-process request
      // before the first tile instruction (kernels/cpu/amx_tile_permission.h).
      const bool tiles = (xcr0 & 0x60000) == 0x60000 && (d & (1u << 24));
      set(CpuFeature::amx_tile, tiles);
      set(CpuFeature::amx_bf16, tiles && (d & (1u << 22)));
      set(CpuFeature::amx_int8, tiles && (d & (1u << 25)));
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
      set(CpuFeature::avx_vnni, s.has(CpuFeature::avx2) && (a & (1u << 4)));
      set(CpuFeature::avx512bf16, s.has(CpuFeature::avx512f) && (a & (1u << 5)));
    }
  }
#endif
  f.logical_cores = std::max(1u, std::thread::hardware_concurrency());
  f.physical_cores = std::max(1, count_physical_cores(f.logical_cores));
  return f;
}

}  // namespace

std::string_view cpu_feature_name(CpuFeature f) {
  switch (f) {
    case CpuFeature::sse42: return "sse4.2";
    case CpuFeature::avx: return "avx";
    case CpuFeature::avx2: return "avx2";
    case CpuFeature::fma: return "fma";
    case CpuFeature::f16c: return "f16c";
    case CpuFeature::avx_vnni: return "avx-vnni";
    case CpuFeature::avx512f: return "avx512f";
    case CpuFeature::avx512bw: return "avx512bw";
    case CpuFeature::avx512vl: return "avx512vl";
    case CpuFeature::avx512vbmi: return "avx512vbmi";
    case CpuFeature::avx512vnni: return "avx512vnni";
    case CpuFeature::avx512bf16: return "avx512bf16";
    case CpuFeature::amx_tile: return "amx-tile";
    case CpuFeature::amx_bf16: return "amx-bf16";
    case CpuFeature::amx_int8: return "amx-int8";
    case CpuFeature::count_: break;
  }
  return "?";
}

std::string CpuFeatureSet::names() const {
  std::string s;
  for (unsigned i = 0; i < static_cast<unsigned>(CpuFeature::count_); ++i) {
    const auto f = static_cast<CpuFeature>(i);
    if (!has(f)) continue;
    if (!s.empty()) s += ' ';
    s += cpu_feature_name(f);
  }
  return s.empty() ? "none" : s;
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

}  // namespace fp4lm
