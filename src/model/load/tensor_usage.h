#pragma once
// The load rule (docs/FORMAT.md, "Nothing in a checkpoint is ignored"): every tensor of a
// checkpoint is consumed by the model (io::Checkpoint::mark_used, recorded by ParamReader) or is
// on the documented ignore list below. What is left is sorted into quantization tensors — a scale,
// a quantizer's state, a low-rank branch: running without one computes something else, so the
// load fails naming them — and model tensors, listed in one WARN line as transformers does.
//
// The ignore list (each entry with the reason inspect prints):
//  - `*rotary_emb.inv_freq`: recomputed from config.json (model/layers/rope.h);
//  - MTP layers when not speculating with them: `mtp.*` (Qwen3.5 / Qwen3-Next / Nemotron-H) and
//    decoder layers numbered from num_hidden_layers on when the config declares
//    num_nextn_predict_layers (DeepSeek-V3, GLM-4.x);
//  - a multi-modal checkpoint's other components (vision / audio towers, projectors): everything
//    outside the language model's prefix, until they run;
//  - `lm_head.weight` of a checkpoint with tie_word_embeddings (the embedding table is the head);
//  - the attention's KV-cache / FP8-attention calibration scales (`k_scale`, `v_scale`,
//    `q_scale`, `prob_scale`, `k_bias`, `v_bias`) when the KV cache is not FP8: the cache then
//    holds the activation dtype (the declared format is logged and, where it is not FP8, only
//    runs on an explicit --kv-cache-dtype; model/state/kv_cache_format.h).
#include <map>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "model/model_config.h"

namespace fp4lm::model {

struct TensorUsage {
  std::map<std::string, std::vector<std::string>> ignored;  // reason -> tensors (the list above)
  std::vector<std::string> unused_quantization;            // an error at load
  std::vector<std::string> unused_model;                   // one WARN line at load
};

// Whether a tensor name is a quantization tensor (scales, zero points, packed codes, quantizer
// state, AWQ / SVDQuant tensors) rather than a model parameter.
bool is_quantization_tensor(const std::string& name);

// What the model did not consume of `ckpt` after a whole model loaded. `fp8_kv`: the KV cache is
// FP8 (its scales are then consumed or missing, never ignored); `mtp_loaded`: the MTP head runs.
TensorUsage tensor_usage(const io::Checkpoint& ckpt, const ModelConfig& c, bool fp8_kv, bool mtp_loaded);

// The rule applied: Error naming the unused quantization tensors; one WARN line listing the
// unused model tensors.
void enforce_tensor_usage(const io::Checkpoint& ckpt, const TensorUsage& u);

}  // namespace fp4lm::model
