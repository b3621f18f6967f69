#pragma once
// From (quant config, engine layer, engine options) to the layer's scheme: what is on disk,
// which (weight, activation) key runs, and in which activation dtype (DESIGN.md §2.2).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "kernels/quant_key.h"
#include "model/engine_options.h"
#include "model/layer_plan.h"
#include "quant/modelopt_config.h"

namespace fp4lm::model {

struct LayerScheme {
  quant::QuantAlgo on_disk = quant::QuantAlgo::None;
  kernels::QuantKey key;
  DType act_dtype = DType::F32;
};

// The dtype of a checkpoint tensor, or nullopt when it is absent (the loader passes its
// checkpoint's; empty = the tensors are not consulted).
using TensorLookup = std::function<std::optional<DType>(const std::string& name)>;

// What one module's tensors say it is: an F8_E4M3 weight is FP8; a U8 weight with an F8_E4M3
// weight_scale is NVFP4 with an input_scale and W4A16_NVFP4 without; anything else None.
quant::QuantAlgo tensor_algo(const TensorLookup& tensors, const std::string& module);

// The on-disk algorithm of an engine layer: its own name when listed (MIXED_PRECISION), else
// its shards', which must agree (Error naming them otherwise; "some but not all shards of X are
// excluded" when exclusions split them). Routers and a tied lm_head are never quantized.
// When the two config files disagree (q.other), a module they resolve differently gets
// tensor_algo() (Error when no tensors are given).
quant::QuantAlgo layer_on_disk_algo(const quant::QuantConfig& q, const LayerSpec& spec,
                                    const TensorLookup& tensors = {});

// When the two config files disagree (q.other): the one WARN line naming both files and what
// the tensors decided for the modules they resolve differently; "" when they agree.
std::string disagreement_warning(const quant::QuantConfig& q, const std::vector<LayerSpec>& layers,
                                 const TensorLookup& tensors);

// NVFP4 -> W4A4, unless the override turns it into W4A16 in the override's dtype. FP8 -> W8A8
// when the layer's modules carry input_scale, else weight-only (fp8_w8a16); without tensors,
// W8A8.
LayerScheme resolve_scheme(const quant::QuantConfig& q, const LayerSpec& spec, const EngineOptions& opts,
                           DType engine_dtype, const TensorLookup& tensors = {});

}  // namespace fp4lm::model
