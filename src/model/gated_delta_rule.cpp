// Dispatch of the gated delta rule (model/gated_delta_rule.h) to the AVX2 + FMA build of its
// code when the CPU has both, else to the baseline build below; the prefill-form switch and the
// mixer timer.
#include "model/gated_delta_rule.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "core/cpu_features.h"

#define FP4LM_GDN_ISA baseline
#define FP4LM_GDN_LANES 4
#include "model/gated_delta_rule_impl.h"
#undef FP4LM_GDN_ISA
#undef FP4LM_GDN_LANES

namespace fp4lm::model::gdn {

namespace avx2 {
void recurrent(const DeltaRuleRows& r, float* S);
void chunked(const DeltaRuleRows& r, float* S);
}  // namespace avx2

namespace {
// FP4LM_DISABLE_ISA=avx2 runs the baseline build (to compare the two).
bool use_avx2() {
  static const bool on = [] {
    const char* off = std::getenv("FP4LM_DISABLE_ISA");
    if (off && std::string_view(off) == "avx2") return false;
    return cpu_features().avx2 && cpu_features().fma;
  }();
  return on;
}
std::atomic<PrefillForm> g_form{PrefillForm::chunked};
std::atomic<bool> g_timing{false};
std::atomic<int64_t> g_rule_ns{0}, g_mixer_ns{0};
}  // namespace

void delta_rule_recurrent(const DeltaRuleRows& r, float* S) {
  if (use_avx2()) avx2::recurrent(r, S);
  else baseline::recurrent(r, S);
}

void delta_rule_chunked(const DeltaRuleRows& r, float* S) {
  if (use_avx2()) avx2::chunked(r, S);
  else baseline::chunked(r, S);
}

void set_prefill_form(PrefillForm f) { g_form.store(f, std::memory_order_relaxed); }
PrefillForm prefill_form() { return g_form.load(std::memory_order_relaxed); }

void enable_timing(bool on) { g_timing.store(on, std::memory_order_relaxed); }
bool timing_enabled() { return g_timing.load(std::memory_order_relaxed); }
void add_times(double rule_s, double mixer_s) {
  g_rule_ns.fetch_add(static_cast<int64_t>(rule_s * 1e9), std::memory_order_relaxed);
  g_mixer_ns.fetch_add(static_cast<int64_t>(mixer_s * 1e9), std::memory_order_relaxed);
}
MixerTimes times() {
  return {static_cast<double>(g_rule_ns.load(std::memory_order_relaxed)) * 1e-9,
          static_cast<double>(g_mixer_ns.load(std::memory_order_relaxed)) * 1e-9};
}
void reset_times() {
  g_rule_ns.store(0, std::memory_order_relaxed);
  g_mixer_ns.store(0, std::memory_order_relaxed);
}

}  // namespace fp4lm::model::gdn
