#pragma once
// A cheap timer of one recurrent mixer family (off by default; decode_bench turns it on): wall
// seconds spent updating the per-sequence state and in the whole mixer, summed over every layer
// and call since the last reset. One per family: gdn::timer() (model/layers/gated_delta_rule.h: the
// delta rule's state read, update and write, and the outputs) and mamba::timer()
// (model/layers/mamba_timing.h: the conv window and the selective scan).
#include <atomic>
#include <cstdint>

namespace fp4lm::model {

struct MixerTimes {
  double state_s = 0, mixer_s = 0;
};

class MixerTimer {
 public:
  void enable(bool on) { on_.store(on, std::memory_order_relaxed); }
  bool enabled() const { return on_.load(std::memory_order_relaxed); }
  void add(double state_s, double mixer_s) {
    state_ns_.fetch_add(static_cast<int64_t>(state_s * 1e9), std::memory_order_relaxed);
    mixer_ns_.fetch_add(static_cast<int64_t>(mixer_s * 1e9), std::memory_order_relaxed);
  }
  MixerTimes times() const {
    return {static_cast<double>(state_ns_.load(std::memory_order_relaxed)) * 1e-9,
            static_cast<double>(mixer_ns_.load(std::memory_order_relaxed)) * 1e-9};
  }
  void reset() {
    state_ns_.store(0, std::memory_order_relaxed);
    mixer_ns_.store(0, std::memory_order_relaxed);
  }

 private:
  std::atomic<bool> on_{false};
  std::atomic<int64_t> state_ns_{0}, mixer_ns_{0};
};

}  // namespace fp4lm::model
