// The gated delta-net's prefill-form switch and mixer timer (model/gated_delta_rule.h).
#include "model/gated_delta_rule.h"

#include <atomic>

namespace fp4lm::model::gdn {

namespace {
std::atomic<PrefillForm> g_form{PrefillForm::chunked};
std::atomic<bool> g_timing{false};
std::atomic<int64_t> g_rule_ns{0}, g_mixer_ns{0};
}  // namespace

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
