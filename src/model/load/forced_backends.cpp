// --linear-backend / --moe-backend NAME: the forced backend runs every layer whose scheme it
// supports; the others keep the oracle's choice (one INFO line says which). Forcing is an error
// only when the backend can run no layer of its kind in the model.
#include <fmt/format.h>

#include <map>

#include "core/error.h"
#include "core/log.h"
#include "model/load/model_loader.h"

namespace fp4lm::model {

void ModelLoader::check_forced_backends() const {
  struct Tally {
    int64_t applied = 0, kept = 0;
    std::string first_layer, first_reason;
    std::map<std::string, int64_t> reasons;  // why not -> layers
  };
  std::map<kernels::LayerKind, Tally> tallies;
  auto forced_name = [&](kernels::LayerKind k) {
    return k == kernels::LayerKind::linear ? opts_.linear_backend : opts_.moe_backend;
  };
  if (opts_.linear_backend.empty() && opts_.moe_backend.empty()) return;
  for (const LayerSpec& spec : layers_) {
    if (forced_name(spec.kind).empty()) continue;
    const LayerReport r = describe(spec);
    Tally& t = tallies[spec.kind];
    if (r.selection.forced_rejection.empty()) {
      ++t.applied;
      continue;
    }
    ++t.kept;
    ++t.reasons[r.selection.forced_rejection];
    if (t.first_layer.empty()) t.first_layer = spec.name, t.first_reason = r.selection.forced_rejection;
  }
  for (const auto& [kind, t] : tallies) {
    const char* kind_name = kind == kernels::LayerKind::linear ? "Linear" : "MoE";
    const char* flag = kind == kernels::LayerKind::linear ? "linear_backend" : "moe_backend";
    if (t.applied == 0)
      fail("forced {} backend '{}' ({}) can run no {} layer of the model: it cannot run layer {}: {}", kind_name,
           forced_name(kind), flag, kind_name, t.first_layer, t.first_reason);
    if (t.kept == 0) continue;
    std::string why;
    for (const auto& [reason, n] : t.reasons) why += fmt::format("{}{} layer(s): {}", why.empty() ? "" : "; ", n, reason);
    log().info("{} {} runs {} of {} {} layers; the other {} keep the oracle's choice ({})", flag, forced_name(kind),
               t.applied, t.applied + t.kept, kind_name, t.kept, why);
  }
}

}  // namespace fp4lm::model
