// MistralForCausalLM: Llama's layout (GQA, no q/k/v bias, a dense SwiGLU MLP in every layer,
// head_dim may differ from hidden/heads) with sliding-window attention: position p attends to
// positions (p - sliding_window, p]. HF's MistralConfig defaults sliding_window to 4096 when the
// key is absent; null turns the window off. A window below max_position_embeddings makes every
// attention layer a sliding-window one (its KV cache a ring of the window: model/state/kv_cache.h).
#include "model/arch/llama_layout.h"

namespace fp4lm::model {

namespace {

class Mistral final : public LlamaLayoutArch {
 public:
  std::string_view hf_name() const override { return "MistralForCausalLM"; }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override {
    read_dense_mlp_keys(r, c);
    if (r.j.contains("sliding_window") && r.j["sliding_window"].is_null()) return;  // no window
    const int64_t window = r.opt<int64_t>("sliding_window", 4096);
    r.positive("sliding_window", window);
    if (window < c.max_position_embeddings) c.attention.set_kind(AttentionKind::full, AttentionKind::sliding, window);
  }
  void synthetic_config(const SampleShape&, nlohmann::json& c) const override {
    c["sliding_window"] = nullptr;
  }
};

}  // namespace

const ArchDef& mistral_arch() {
  static const Mistral d;
  return d;
}

}  // namespace fp4lm::model
