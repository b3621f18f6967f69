#pragma once
// Writes small checkpoints with random weights in the exact HF / ModelOpt layout, for tests,
// the demo and benchmarks: any supported architecture, unquantized or quantized by the library's
// own reference quantizer (NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION), or for GB-scale benchmarks
// as random codes (SyntheticOptions::random_codes). What to write comes from the architecture:
// its config keys (ArchDef::synthetic_config over a model::SampleShape), then its layer plan and
// layer_params for that config; nothing here is per architecture.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "model/arch/sample_shape.h"
#include "quant/modelopt_config.h"

namespace fp4lm::synth {

// The sizes (model::SampleShape: what the architecture's synthetic_config turns into config.json
// keys; its plan then says which tensors to write) and how to write them.
struct SyntheticOptions : model::SampleShape {
  quant::QuantAlgo algo = quant::QuantAlgo::NVFP4;
  bool tie_word_embeddings = false;
  bool quantize_lm_head = false;
  std::vector<std::string> exclude;  // extra exclude_modules patterns (kept unquantized)
  // MIXED_PRECISION: module path -> algorithm; unlisted modules stay unquantized.
  std::map<std::string, quant::QuantAlgo> mixed;
  // Quantize each shard of a fused group with its own amax, so q/k/v (gate/up, w1/w3) get
  // different weight_scale_2 values (ModelOpt shares one; some exporters don't).
  bool distinct_shard_scales = false;
  // AWQ as ModelOpt exports it: every quantized Linear group (not MoE experts) stores one
  // `pre_quant_scale` [k] (the dense dtype, values 2^u, u uniform in [-1, 1]) shared by its
  // shards, and its weights are quantized divided by it per input channel; the quant configs say
  // "pre_quant_scale": true, "has_zero_point": false. W8A8_SQ_PER_CHANNEL (SmoothQuant) writes
  // one for every quantized group whatever this says, MoE experts included.
  bool pre_quant_scale = false;
  // Where the quant config goes: hf_quant_config.json (legacy form), config.json's
  // quantization_config, or both.
  bool write_hf_quant_config = true;
  bool write_config_quantization = true;
  DType dense_dtype = DType::BF16;  // unquantized tensors and torch_dtype
  // Unquantized MoE experts as the original bf16 Qwen3.5 checkpoints store them: one
  // `<experts>.gate_up_proj` [E, 2I, D] and one `<experts>.down_proj` [E, D, I] per layer
  // instead of per-expert 2-D tensors.
  bool fused_experts = false;
  // gpt-oss: the experts as OpenAI publishes them, MXFP4 `*_blocks` / `*_scales` (random codes, E8M0
  // scales around 1/sqrt(in)) with config.json's quantization_config {"quant_method": "mxfp4"};
  // otherwise (algo None) as transformers writes them dequantized, input-major bf16.
  bool mxfp4_experts = false;
  // Multi-token-prediction tensors (`mtp.*`) next to the model, and for a VL architecture
  // (…ForConditionalGeneration: config under text_config, tensors under model.language_model.)
  // vision tensors (`model.visual.*`), as published checkpoints carry them; the loader ignores
  // them and a quantized checkpoint excludes them ("mtp*", "model.visual*").
  bool extra_tensors = false;
  // Qwen3.5 / Qwen3-Next hybrids: a real MTP head (mtp_num_hidden_layers 1; mtp.fc, its norms and
  // one full-attention layer, unquantized as NVIDIA's files keep it; quantized configs exclude
  // "*mtp*"), the draft model of speculative method "mtp". Not with extra_tensors.
  bool mtp_head = false;
  // Keys set over the config.json the architecture writes for these sizes (its text model's part,
  // after ArchDef::synthetic_config): a published model's own values (MLA head dims, Gemma 4's
  // window and layer_types, ...), so a benchmark writes real shapes without a field here for
  // each. The plan, and so the tensors, follow the result.
  nlohmann::json config_overrides = nlohmann::json::object();
  // GB-scale benchmark checkpoints: quantized Linears (NVFP4, NVFP4_AWQ, W4A16_NVFP4, FP8) written
  // as random codes and scales directly (the reference quantizer over GBs of floats would take
  // minutes), scales chosen for unit-gain layers; unquantized weights uniform with the same
  // gain; streamed to model.safetensors tensor by tensor, never all in memory. For timing only.
  bool random_codes = false;
  uint64_t seed = 1;
};

// The config.json of o (VL architectures: nested under text_config).
nlohmann::json synthetic_config_json(const SyntheticOptions& o);

// Writes config.json, generation_config.json, hf_quant_config.json (if asked) and
// model.safetensors into `dir` (created if needed).
void write_synthetic_checkpoint(const std::string& dir, const SyntheticOptions& o);

}  // namespace fp4lm::synth
