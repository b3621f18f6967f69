#pragma once
// Loads the layers of one checkpoint: resolves each layer's scheme, has the scheme's quant method
// (model/quant_method/) gather and validate its parameters, asks the oracle for a backend and
// builds the kernel. Architectures
// (model/arch/*) call it; `fp4lm inspect` uses describe() alone.
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/checkpoint.h"
#include "kernels/registry.h"
#include "model/engine_options.h"
#include "model/layer_plan.h"
#include "model/layer_scheme.h"
#include "model/layers/linear.h"
#include "model/model_config.h"
#include "model/state/stage_carried.h"
#include "quant/quant_config.h"

namespace fp4lm::model {

struct LayerReport {
  const LayerSpec* spec = nullptr;
  LayerScheme scheme;
  kernels::Selection selection;
};

// Where the text model's "model." tensors are stored: c.tensor_prefix, except for a VL checkpoint
// saved in the original layout (transformers 5 writes Gemma 3's as language_model.model.*, not
// model.language_model.*).
std::string text_tensor_prefix(const ModelConfig& c, const io::Checkpoint& ckpt);

class ModelLoader {
 public:
  ModelLoader(std::shared_ptr<io::Checkpoint> ckpt, EngineOptions opts);
  // With the model config given rather than the checkpoint's config.json (whose
  // quantization_config is still the one read): an architecture that is not a CausalLM but whose
  // blocks are a registered one's (DiffusionGemma's are Gemma 4's, model/diffusion_gemma.h).
  // `read_as` {stored prefix, engine prefix}: its tensors and quantization entries stored under the
  // first are read under the second (as a wrapper's are).
  ModelLoader(std::shared_ptr<io::Checkpoint> ckpt, EngineOptions opts, const nlohmann::json& model_config,
              const std::vector<std::pair<std::string, std::string>>& read_as = {});

  const io::Checkpoint& checkpoint() const { return *ckpt_; }
  const ModelConfig& config() const { return config_; }
  const quant::QuantConfig& quant_config() const { return *quant_; }
  // When config.json's quantization_config and hf_quant_config.json disagree: the one WARN line
  // the loader logs (both files, what differs, what the tensors decided per module); "" when
  // they agree.
  std::string config_disagreement() const;
  const EngineOptions& options() const { return opts_; }
  DType dtype() const { return dtype_; }  // activation / KV dtype
  const std::vector<LayerSpec>& layers() const { return layers_; }
  const LayerSpec& layer(const std::string& name) const;  // Error if not planned
  // Plans the MTP head (model/layers/mtp_head.h) of a checkpoint that has one (Error naming config.json
  // otherwise): mtp.layers.0.* is read as decoder layer num_layers (a full-attention layer),
  // mtp.fc as a Linear; returns that layer's index. The quantization config is asked about the
  // names on disk, and a module stored in a float dtype without scales is unquantized whatever it
  // says (NVIDIA's NVFP4 files keep mtp.* in bf16, their exclusion globs missing mtp.fc).
  int64_t plan_mtp_head();

  // Scheme and backend choice, touching no weights.
  LayerReport describe(const LayerSpec& spec) const;
  // Validated views of the layer's parameters (Error naming the tensor on any defect).
  kernels::LinearWeights linear_weights(const LayerSpec& spec, const LayerScheme& scheme) const;
  kernels::MoeWeights moe_weights(const LayerSpec& spec, const LayerScheme& scheme) const;
  // A Linear layer's AWQ pre_quant_scale [in_features], empty when it stores none
  // (read_pre_quant_scale, model/quant_method/quant_method.h); load_linear applies it.
  std::vector<float> pre_quant_scale(const LayerSpec& spec) const;

  // Build the kernels. Logs the oracle's choice once per (kind, scheme) at INFO.
  std::unique_ptr<Linear> load_linear(const std::string& name);
  std::unique_ptr<FusedMoe> load_moe(const std::string& name);
  // A Linear outside the text model's plan (a vision tower's), planned and loaded at once. As the
  // MTP head's: a module stored in a float dtype without scales runs unquantized whatever the
  // quantization config says (exports keep towers in bf16, not always listing them as excluded).
  std::unique_ptr<Linear> load_extra_linear(LayerSpec spec);

  // A plain (non-Linear) tensor: norms, embeddings, q_norm/k_norm. Checks the shape and that
  // the dtype is F32, BF16 or F16; Error names the tensor otherwise.
  const TensorView& tensor(const std::string& name, const Shape& expected) const;
  std::vector<float> tensor_f32(const std::string& name, const Shape& expected) const;

  // Weight bytes of everything loaded so far (kernels' resident weights).
  size_t loaded_weight_bytes() const { return loaded_bytes_; }
  // Linear layers loaded so far that apply an AWQ pre_quant_scale.
  int64_t pre_quant_scaled_layers() const { return pre_quant_scaled_; }

  // One INFO line per distinct message and load (the kernel choices every layer repeats).
  void log_once(const std::string& msg);

  // What the layers of one model share, made by the first layer that asks for `key` (`make`
  // returns a std::shared_ptr<T>): e.g. Gemma 4's per-layer input embeddings, computed once per
  // step for every layer.
  template <class T, class Make>
  std::shared_ptr<T> shared(const std::string& key, Make make) {
    std::shared_ptr<void>& p = shared_[key];
    if (!p) p = make();
    return std::static_pointer_cast<T>(p);
  }
  // Per-step values that cross the cuts of a pipeline (model/state/stage_carried.h), in the order
  // every stage registers them.
  void carry_across_stages(std::shared_ptr<StageCarried> c) { carried_.push_back(std::move(c)); }
  const std::vector<std::shared_ptr<StageCarried>>& carried_across_stages() const { return carried_; }

 private:
  void log_selection(const LayerReport& r);
  TensorLookup tensor_lookup() const;
  // --linear-backend / --moe-backend: Error when the forced backend can run no layer of its kind;
  // one INFO line for the layers that keep the oracle's choice (forced_backends.cpp).
  void check_forced_backends() const;

  std::shared_ptr<io::Checkpoint> ckpt_;
  EngineOptions opts_;
  ModelConfig config_;
  std::shared_ptr<const quant::QuantConfig> quant_;
  DType dtype_ = DType::F32;
  std::vector<LayerSpec> layers_;
  std::string mtp_engine_prefix_;
  std::vector<std::string> extra_layers_;  // load_extra_linear's
  std::shared_ptr<const quant::QuantConfig> unquantized_;  // the MTP head's float modules  // "model.layers.<num_layers>." once plan_mtp_head ran
  std::map<std::string, bool> logged_;
  std::map<std::string, std::shared_ptr<void>> shared_;
  std::vector<std::shared_ptr<StageCarried>> carried_;
  size_t loaded_bytes_ = 0;
  int64_t pre_quant_scaled_ = 0;
};

}  // namespace fp4lm::model
