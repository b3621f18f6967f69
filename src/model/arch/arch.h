#pragma once
// One definition per HF architecture, one file each in model/arch/, listed once in
// model/arch/registry.cpp. An ArchDef owns what differs between architectures: the config.json
// keys only it reads, its plan of engine layers (the HF module names: `block_sparse_moe`,
// `w1/w3/w2`, ...), how each decoder layer is built, and the keys the synthetic writer adds for
// it. Everything shared — the common config keys, attention, MLP and MoE blocks, norms, RoPE,
// quant methods, kernels — lives elsewhere in model/ and is only called from here. A decoder
// layer is pre-norm: x += mixer(norm(x)); x += ffn(norm(x)).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "model/config_reader.h"
#include "model/feed_forward.h"
#include "model/layer_plan.h"
#include "model/mixer.h"
#include "model/model_config.h"
#include "model/rope.h"

namespace fp4lm::model {

class ModelLoader;
struct SyntheticOptions;

// A parameter of a decoder layer that is not a Linear (norm weights and the like).
struct LayerParam {
  std::string name;  // "model.layers.0.input_layernorm.weight"
  Shape shape;
};

class ArchDef {
 public:
  virtual ~ArchDef() = default;
  // The HF class name in config.json's `architectures`, e.g. "MixtralForCausalLM".
  virtual std::string_view hf_name() const = 0;
  // Reads the keys only this architecture has into c (the shared keys are already there).
  // Error naming config.json and the field on a bad value.
  virtual void parse_config(const ConfigReader& r, ModelConfig& c) const = 0;
  // Appends the engine layers of decoder layer i, in model order.
  virtual void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const = 0;
  // The non-Linear parameters of decoder layer i. Default: the pre-norm decoder's
  // input_layernorm and post_attention_layernorm, plus q_norm / k_norm when c.qk_norm.
  virtual std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const;
  // The mixer of decoder layer i, loaded. Default: self-attention (q/k/v bias, q_norm/k_norm as
  // the config says). A hybrid architecture returns a different Mixer for some layers.
  virtual std::unique_ptr<Mixer> make_mixer(ModelLoader& l, int64_t i, const Rope& rope) const;
  // The feed-forward block of decoder layer i, loaded.
  virtual std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const = 0;
  // Adds this architecture's own keys to a synthetic config.json.
  virtual void synthetic_config(const SyntheticOptions& o, nlohmann::json& c) const = 0;
};

// Every supported architecture, in registry order.
const std::vector<const ArchDef*>& architectures();
// The architecture named `hf_name`, or nullptr.
const ArchDef* find_arch(std::string_view hf_name);

}  // namespace fp4lm::model
