// The Mamba-2 mixers' prefill-form switch and timer (model/layers/mamba_timing.h).
#include "model/layers/mamba_timing.h"

#include <atomic>

namespace fp4lm::model::mamba {

namespace {
std::atomic<PrefillForm> g_form{PrefillForm::recurrent};
}  // namespace

void set_prefill_form(PrefillForm f) { g_form.store(f, std::memory_order_relaxed); }
PrefillForm prefill_form() { return g_form.load(std::memory_order_relaxed); }

MixerTimer& timer() {
  static MixerTimer t;
  return t;
}

}  // namespace fp4lm::model::mamba
