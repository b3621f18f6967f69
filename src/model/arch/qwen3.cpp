// Qwen3ForCausalLM: Llama's layout with per-head q_norm / k_norm RMSNorm before RoPE, no q/k/v
// bias unless attention_bias says so.
#include <fmt/format.h>

#include "model/arch/arch.h"
#include "model/mlp.h"

namespace fp4lm::model {

namespace {

class Qwen3 final : public ArchDef {
 public:
  std::string_view hf_name() const override { return "Qwen3ForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_dense_mlp_keys(r, c);
    c.qk_norm = true;
  }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    plan_attention(c, i, out);
    plan_dense_mlp(c, i, fmt::format("model.layers.{}.mlp", i), c.intermediate_size, out);
  }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override {
    return std::make_unique<DenseMlp>(l, fmt::format("model.layers.{}.mlp", i));
  }
  void synthetic_config(const SyntheticOptions&, nlohmann::json&) const override {}
};

}  // namespace

const ArchDef& qwen3_arch() {
  static const Qwen3 d;
  return d;
}

}  // namespace fp4lm::model
