#include "model/mamba_timing.h"

#include <atomic>
#include <cstdint>

namespace fp4lm::model::mamba {

namespace {
std::atomic<bool> g_timing{false};
std::atomic<int64_t> g_state_ns{0}, g_mixer_ns{0};
}  // namespace

void enable_timing(bool on) { g_timing.store(on, std::memory_order_relaxed); }
bool timing_enabled() { return g_timing.load(std::memory_order_relaxed); }
void add_times(double state_s, double mixer_s) {
  g_state_ns.fetch_add(static_cast<int64_t>(state_s * 1e9), std::memory_order_relaxed);
  g_mixer_ns.fetch_add(static_cast<int64_t>(mixer_s * 1e9), std::memory_order_relaxed);
}
MixerTimes times() {
  return {static_cast<double>(g_state_ns.load(std::memory_order_relaxed)) * 1e-9,
          static_cast<double>(g_mixer_ns.load(std::memory_order_relaxed)) * 1e-9};
}
void reset_times() {
  g_state_ns.store(0, std::memory_order_relaxed);
  g_mixer_ns.store(0, std::memory_order_relaxed);
}

}  // namespace fp4lm::model::mamba
