// The Mamba-2 scan variants' table (priority order), their needs, and the run-time choice.
// Kernels: cpu/{avx512,avx2,reference}/ssm_scan.cpp (all cpu/ssm_scan_forms.h).
#include "kernels/ssm_scan.h"

namespace fp4lm::kernels {

namespace cpu {
namespace baseline {
void ssm_scan(const SsmScanRows& r, float* S);
void ssm_scan_chunked(const SsdRows& r, float* S);
}  // namespace baseline
#ifdef FP4LM_HAVE_AVX2_KERNELS
namespace avx2 {
void ssm_scan(const SsmScanRows& r, float* S);
void ssm_scan_chunked(const SsdRows& r, float* S);
}  // namespace avx2
#endif
#ifdef FP4LM_HAVE_AVX512_KERNELS
namespace avx512 {
void ssm_scan(const SsmScanRows& r, float* S);
void ssm_scan_chunked(const SsdRows& r, float* S);
}  // namespace avx512
#endif
}  // namespace cpu

namespace {

// The AVX2 build uses AVX2 and FMA only (no F16C instruction in it); the AVX-512 build what
// every AVX-512 kernel file may use (kernels/isa.h).
constexpr IsaNeeds kAvx2Needs{Isa::avx2, {CpuFeature::avx2, CpuFeature::fma}};
constexpr IsaNeeds kAvx512Needs{Isa::avx512, kAvx512Features};
#ifdef FP4LM_HAVE_AVX512_KERNELS
constexpr SsmScanKernel kAvx512{"avx512", kAvx512Needs, cpu::avx512::ssm_scan, cpu::avx512::ssm_scan_chunked};
#else
constexpr SsmScanKernel kAvx512{"avx512", kAvx512Needs, nullptr, nullptr};
#endif
#ifdef FP4LM_HAVE_AVX2_KERNELS
constexpr SsmScanKernel kAvx2{"avx2", kAvx2Needs, cpu::avx2::ssm_scan, cpu::avx2::ssm_scan_chunked};
#else
constexpr SsmScanKernel kAvx2{"avx2", kAvx2Needs, nullptr, nullptr};
#endif
constexpr SsmScanKernel kReference{"reference", {Isa::portable, {}}, cpu::baseline::ssm_scan,
                                   cpu::baseline::ssm_scan_chunked};

const SsmScanKernel& choose() {
  for (const SsmScanKernel* k : ssm_scan_kernels())
    if (k->unavailable_reason().empty()) return *k;
  return kReference;
}

}  // namespace

std::vector<const SsmScanKernel*> ssm_scan_kernels() { return {&kAvx512, &kAvx2, &kReference}; }

const SsmScanKernel& ssm_scan_kernel() {
  static const SsmScanKernel& k = choose();
  return k;
}

void ssm_scan(const SsmScanRows& r, float* S) { ssm_scan_kernel().scan(r, S); }
void ssm_scan_chunked(const SsdRows& r, float* S) { ssm_scan_kernel().chunked(r, S); }

}  // namespace fp4lm::kernels
