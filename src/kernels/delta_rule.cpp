// The delta-rule variants' table (priority order), their needs, and the run-time choice.
// Kernels: cpu/avx2/delta_rule.cpp, cpu/reference/delta_rule.cpp (both cpu/delta_rule_forms.h).
#include "kernels/delta_rule.h"

namespace fp4lm::kernels {

namespace cpu {
namespace baseline {
void recurrent(const DeltaRuleRows& r, float* S);
void chunked(const DeltaRuleRows& r, float* S);
}  // namespace baseline
#ifdef FP4LM_HAVE_AVX2_KERNELS
namespace avx2 {
void recurrent(const DeltaRuleRows& r, float* S);
void chunked(const DeltaRuleRows& r, float* S);
}  // namespace avx2
#endif
}  // namespace cpu

namespace {

// The AVX2 build needs AVX2 and FMA only (no F16C instruction in it).
#ifdef FP4LM_HAVE_AVX2_KERNELS
constexpr DeltaRuleKernel kAvx2{"avx2", {Isa::avx2, {CpuFeature::avx2, CpuFeature::fma}}, cpu::avx2::recurrent,
                                cpu::avx2::chunked};
#else
constexpr DeltaRuleKernel kAvx2{"avx2", {Isa::avx2, {CpuFeature::avx2, CpuFeature::fma}}, nullptr, nullptr};
#endif
constexpr DeltaRuleKernel kReference{"reference", {Isa::portable, {}}, cpu::baseline::recurrent,
                                     cpu::baseline::chunked};

const DeltaRuleKernel& choose() {
  for (const DeltaRuleKernel* k : delta_rule_kernels())
    if (k->unavailable_reason().empty()) return *k;
  return kReference;
}

}  // namespace

std::vector<const DeltaRuleKernel*> delta_rule_kernels() { return {&kAvx2, &kReference}; }

const DeltaRuleKernel& delta_rule_kernel() {
  static const DeltaRuleKernel& k = choose();
  return k;
}

void delta_rule_recurrent(const DeltaRuleRows& r, float* S) { delta_rule_kernel().recurrent(r, S); }
void delta_rule_chunked(const DeltaRuleRows& r, float* S) { delta_rule_kernel().chunked(r, S); }

}  // namespace fp4lm::kernels
