#pragma once
// From (quant config, engine layer, engine options) to the layer's scheme: what is on disk
// (family and scheme), which (weight, activation) key runs it, and in which activation dtype
// (docs/ARCHITECTURE.md, "Loading a model"). The config answers per module; the family's quant methods
// (model/quant_method/) recognize tensors and choose the key.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/quant_key.h"
#include "model/engine_options.h"
#include "model/layer_plan.h"
#include "quant/quant_config.h"

namespace fp4lm::model {

struct LayerScheme {
  quant::DiskFormat on_disk;  // the family's tensor names and the scheme they hold
  kernels::QuantKey key;
  DType act_dtype = DType::F32;
};

// The dtype of a checkpoint tensor, or nullopt when it is absent (the loader passes its
// checkpoint's; empty = the tensors are not consulted).
using TensorLookup = std::function<std::optional<DType>(const std::string& name)>;

// The config's view of the checkpoint's tensors: dtypes, and schemes recognized by the family's
// quant methods (empty when `tensors` is).
quant::ModuleTensors module_tensors(quant::Family family, const TensorLookup& tensors);

// The on-disk scheme of an engine layer: the one listed for its own (fused) name, else its
// shards', which must agree (Error naming them otherwise; "some but not all shards of X are
// excluded" when exclusions split them). Routers (and the GDN's in_proj_a/b) are what their
// tensors hold; a tied lm_head is never quantized.
quant::Scheme layer_on_disk_scheme(const quant::QuantConfig& q, const LayerSpec& spec,
                                   const TensorLookup& tensors = {});

// The config's WARN line (e.g. two config files that disagree) for the modules of `layers`; ""
// when there is nothing to say.
std::string config_warning(const quant::QuantConfig& q, const std::vector<LayerSpec>& layers,
                           const TensorLookup& tensors);

// The layer's scheme: on-disk format, and the key its quant method chooses (NVFP4 -> W4A4; FP8
// -> W8A8 or weight-only, see quant_method.h); the activation override turns NVFP4 W4A4 into
// W4A16 in the override's dtype. Checks once that the method reads the key's weight format.
LayerScheme resolve_scheme(const quant::QuantConfig& q, const LayerSpec& spec, const EngineOptions& opts,
                           DType engine_dtype, const TensorLookup& tensors = {});

}  // namespace fp4lm::model
