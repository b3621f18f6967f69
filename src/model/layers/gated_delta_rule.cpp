// The gated delta-net's prefill-form switch and mixer timer (model/layers/gated_delta_rule.h).
#include "model/layers/gated_delta_rule.h"

#include <atomic>

namespace fp4lm::model::gdn {

namespace {
std::atomic<PrefillForm> g_form{PrefillForm::chunked};
}  // namespace

void set_prefill_form(PrefillForm f) { g_form.store(f, std::memory_order_relaxed); }
PrefillForm prefill_form() { return g_form.load(std::memory_order_relaxed); }

MixerTimer& timer() {
  static MixerTimer t;
  return t;
}

}  // namespace fp4lm::model::gdn
