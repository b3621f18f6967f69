#pragma once
// What an ArchDef gets to build a decoder layer with: the loader (weights and config), the
// model's RoPE, the sequence-state layout its mixers declare their per-sequence state in
// (model/state/state_layout.h), and the KV cache dtype (an FP8 cache needs the layers' scales).
#include "core/dtype.h"

namespace fp4lm::model {

class ModelLoader;
class Rope;
class StateLayout;

struct LayerBuild {
  ModelLoader& loader;
  const Rope& rope;
  StateLayout& state;
  DType kv_dtype;
};

}  // namespace fp4lm::model
