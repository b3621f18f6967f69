#pragma once
// What a MoE expert does between its two projections: h13 = x·w13ᵀ (+ bias) holds a gate and an
// up value per intermediate column; the activation turns them into the w2 input. One parameter of
// the MoE problem (MoeProblem::activation), chosen by the architecture's plan (LayerSpec), and one
// function every MoE kernel calls (apply_expert_activation), so all backends agree.
//  silu            silu(gate) · up                         (Llama-family experts; the default)
//  gelu_tanh       gelu_tanh(gate) · up                    (Gemma-style gated experts)
//  clamped_swiglu  g = min(gate, limit), u = clamp(up, ±limit):
//                  (u + 1) · g · sigmoid(alpha · g)        (gpt-oss, HF GptOssExperts._apply_gate)
//  clamped_silu    silu(min(gate, limit)) · clamp(up, ±limit) (DeepSeek-V4, HF DeepseekV4Experts)
// Layout of h13: gate columns [0, inter) then up columns [inter, 2·inter) (the fused gate_up of
// two stacked projections), or interleaved — column 2c the gate, 2c + 1 the up of column c (gpt-oss's
// gate_up_proj).
#include <cstdint>
#include <string>

namespace fp4lm::kernels {

struct ExpertActivation {
  enum class Gate { silu, gelu_tanh, clamped_swiglu, clamped_silu };
  Gate gate = Gate::silu;
  bool interleaved = false;
  float alpha = 1.702f, limit = 7.0f;  // clamped_swiglu (alpha, limit), clamped_silu (limit)
  bool operator==(const ExpertActivation&) const = default;
};

// "silu", "gelu_tanh", "clamped_swiglu(alpha=1.702, limit=7, interleaved)".
std::string expert_activation_name(const ExpertActivation& a);

// out[c] for c < inter from h13[0, 2·inter), float32. The silu/halves case computes exactly
// g / (1 + exp(−g)) · u in float32 (what the MoE kernels always did).
void apply_expert_activation(const ExpertActivation& a, const float* h13, int64_t inter, float* out);

}  // namespace fp4lm::kernels
