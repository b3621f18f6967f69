#pragma once
// Writes small checkpoints with random weights in the exact HF / ModelOpt layout, for tests,
// the demo and benchmarks: any supported architecture, unquantized or quantized by the library's
// own reference quantizer (NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "quant/modelopt_config.h"

namespace fp4lm::model {

struct SyntheticOptions {
  std::string architecture = "Qwen3MoeForCausalLM";
  quant::QuantAlgo algo = quant::QuantAlgo::NVFP4;
  int64_t vocab = 256, hidden = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 16;
  int64_t intermediate = 96;  // dense MLP (and Mixtral experts)
  int64_t experts = 4, top_k = 2, moe_intermediate = 32, shared_expert_intermediate = 48;
  // Qwen3.5-MoE hybrid: gated delta-net dims; layer i is full attention iff (i+1) % interval == 0.
  int64_t linear_key_heads = 2, linear_value_heads = 4, linear_key_head_dim = 16, linear_value_head_dim = 16;
  int64_t conv_kernel = 4, full_attention_interval = 2;
  // Nemotron-H: the layer pattern (M Mamba-2, * attention, - MLP, E MoE; extended with M-M* to
  // `layers`) and the Mamba-2 dims (conv_kernel above).
  std::string hybrid_pattern = "M*M-";
  int64_t mamba_heads = 4, mamba_head_dim = 8, ssm_state = 16, mamba_groups = 2;
  int64_t moe_latent = 0;  // moe_latent_size of the 'E' layers (0: none)
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
  // Gemma 4: num_kv_shared_layers (the last layers read the K/V of earlier ones; 0: none).
  int64_t kv_shared_layers = 0;
  // Gemma 4: hidden_size_per_layer_input (per-layer input embeddings, the E2B / E4B form; 0: none).
  int64_t ple_dim = 0;
  uint64_t seed = 1;
};

// The config.json of o (VL architectures: nested under text_config).
nlohmann::json synthetic_config_json(const SyntheticOptions& o);

// Writes config.json, generation_config.json, hf_quant_config.json (if asked) and
// model.safetensors into `dir` (created if needed).
void write_synthetic_checkpoint(const std::string& dir, const SyntheticOptions& o);

}  // namespace fp4lm::model
