#pragma once
// How much of a tensor one decode token reads. A routed expert's weights are read only by the
// tokens routed to it, so on average top_k / num_experts of a routed-experts tensor (the
// per-expert modules `<block>.experts.<e>.<proj>` or the fused `<block>.experts.gate_up_proj`);
// every other tensor (attention, dense MLP, shared experts, router) is read whole. The one rule
// behind decode_bench's roofline and the pipeline's stage balance (dist/stage_plan.h).
#include <cstdint>
#include <string_view>

namespace fp4lm::model {

// Whether `name` is (part of) a routed expert's weights: it contains ".experts.".
bool is_routed_expert_tensor(std::string_view name);

// The bytes of tensor `name`, holding `bytes`, that one token reads on average (a model without
// experts: num_experts = 0).
double bytes_read_per_token(std::string_view name, double bytes, int64_t num_experts, int64_t top_k);

}  // namespace fp4lm::model
