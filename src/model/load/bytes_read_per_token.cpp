#include "model/load/bytes_read_per_token.h"

namespace fp4lm::model {

bool is_routed_expert_tensor(std::string_view name) { return name.find(".experts.") != std::string_view::npos; }

double bytes_read_per_token(std::string_view name, double bytes, int64_t num_experts, int64_t top_k) {
  if (num_experts <= 0 || !is_routed_expert_tensor(name)) return bytes;
  return bytes * static_cast<double>(top_k) / static_cast<double>(num_experts);
}

}  // namespace fp4lm::model
