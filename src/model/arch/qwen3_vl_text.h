#pragma once
// What the text models of Qwen3-VL (arch/qwen3_vl.cpp) and Qwen3-VL-MoE (arch/qwen3_vl_moe.cpp)
// share beyond Qwen3's layers: their config defaults and RoPE keys.
#include <nlohmann/json.hpp>

#include "model/config_reader.h"
#include "model/model_config.h"

namespace fp4lm::model {

// transformers' Qwen3VLTextConfig defaults the published configs may leave out: head_dim 128 for the
// dense model (the MoE's is hidden / heads, the shared parser's default), rope_theta 500000.
void fill_qwen3_vl_text_defaults(nlohmann::json& j, bool dense);

// q_norm / k_norm, RoPE over the whole head_dim, and M-RoPE: rope_parameters (transformers 5) or
// rope_scaling (the published configs) `mrope_section` [t, h, w] frequency-pair counts, default
// [24, 20, 20] as Qwen3VLTextRotaryEmbedding's; always interleaved, as that class computes it
// whatever `mrope_interleaved` says (false is a warning).
void read_qwen3_vl_text_keys(const ConfigReader& r, ModelConfig& c);

}  // namespace fp4lm::model
