#pragma once
// From (quant config, engine layer, engine options) to the layer's scheme: what is on disk,
// which (weight, activation) key runs, and in which activation dtype (DESIGN.md §2.2).
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

// The on-disk algorithm of an engine layer: its own name when listed (MIXED_PRECISION), else
// its shards', which must agree (Error naming them otherwise; "some but not all shards of X are
// excluded" when exclusions split them). Routers and a tied lm_head are never quantized.
quant::QuantAlgo layer_on_disk_algo(const quant::QuantConfig& q, const LayerSpec& spec);

// NVFP4 -> W4A4, unless the override turns it into W4A16 in the override's dtype.
LayerScheme resolve_scheme(const quant::QuantConfig& q, const LayerSpec& spec, const EngineOptions& opts,
                           DType engine_dtype);

}  // namespace fp4lm::model
