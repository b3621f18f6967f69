#pragma once
// One definition per HF architecture, one file each in model/arch/, listed once in
// model/arch/registry.cpp. An ArchDef owns what differs between architectures: the config.json
// keys only it reads, its plan of engine layers (the HF module names: `block_sparse_moe`,
// `w1/w3/w2`, ...), how each decoder layer is built, and the keys the synthetic writer adds for
// it. Everything shared — the common config keys, attention, MLP and MoE blocks, norms, RoPE,
// quant methods, kernels — lives elsewhere in model/ and is only called from here. The block
// shape of a decoder layer is the architecture's (make_layer, model/layers/decoder_layer.h); the default
// is the pre-norm block x += mixer(norm(x)); x += ffn(norm(x)).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "model/arch/sample_shape.h"
#include "model/config_reader.h"
#include "model/layers/decoder_layer.h"
#include "model/layers/feed_forward.h"
#include "model/layers/hyper_connection.h"
#include "model/image_encoder.h"
#include "model/layer_build.h"
#include "model/layer_plan.h"
#include "model/layers/mixer.h"
#include "model/model_config.h"
#include "model/layers/rope.h"

namespace fp4lm::model {

class ModelLoader;

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
  // Sets the keys absent from config.json (its text model's part) to the defaults of
  // transformers' config class, where published configs rely on them. Default: nothing.
  virtual void fill_config_defaults(nlohmann::json&) const {}
  // A multi-modal wrapper around this architecture's text model whose config.json holds the text
  // model's keys under one of `config_keys` (the first present) and whose tensors all sit under
  // `tensor_prefix` (ModelConfig::wrapper_prefix). nullopt (the default): not a wrapper, or the
  // generic …ForConditionalGeneration form (text_config, model.language_model.).
  struct Wrapper {
    std::vector<std::string> config_keys;
    std::string tensor_prefix;
    // Set where the wrapper's own lm_head (not the language model's) is tied by the top level's
    // tie_word_embeddings, this value where the top level leaves it out (the wrapper config class's
    // default; Kimi K2.5's is true). The top level's value then wins over the language model's.
    std::optional<bool> top_level_tie = std::nullopt;
  };
  virtual std::optional<Wrapper> wrapper() const { return std::nullopt; }
  // Whether a …ForConditionalGeneration config.json may keep the text model's keys at the top level
  // instead of under text_config (Qwen2-VL / Qwen2.5-VL's published configs: transformers' config
  // class lifts them into text_config). Default: false, text_config required.
  virtual bool flat_text_config() const { return false; }
  // Reads the keys only this architecture has into c (the shared keys are already there).
  // Error naming config.json and the field on a bad value.
  virtual void parse_config(const ConfigReader& r, ModelConfig& c) const = 0;
  // Appends the engine layers of decoder layer i, in model order.
  virtual void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const = 0;
  // The non-Linear parameters of decoder layer i (what make_layer loads besides Linears; the
  // synthetic writer writes them). Default: the pre-norm block's norms (pre_norm_names), plus
  // q_norm / k_norm when c.qk_norm.
  virtual std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const;
  // Decoder layer i, loaded; its mixers declare their per-sequence state in b.state. Default:
  // PreNormLayer of pre_norm_names(i), make_mixer and make_ffn. An architecture with another
  // block shape (one mixer per layer, extra norms, per-layer inputs, K/V shared between layers)
  // returns its own DecoderLayer; layers are built in order, so layer i may keep what an earlier
  // one declared (e.g. its KV slot).
  virtual std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& b, int64_t i) const;
  // The mixer of decoder layer i, loaded. Default: self-attention (q/k/v bias, q_norm/k_norm,
  // the window of ModelConfig::attention's layer i). A hybrid architecture returns a different Mixer for some layers.
  virtual std::unique_ptr<Mixer> make_mixer(const LayerBuild& b, int64_t i) const;
  // The earlier decoder layer whose K/V decoder layer i attends to instead of its own (-1: its
  // own; Gemma 4's num_kv_shared_layers). A pipeline stage sends such K/V on to the later stages
  // that read it (CausalLM, kv_read_across). Default: ModelConfig::attention's kv_source.
  virtual int64_t kv_source(const ModelConfig& c, int64_t i) const;
  // The feed-forward block of decoder layer i, loaded.
  virtual std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const = 0;
  // Modules the architecture leaves unquantized by default when fp4lm quantizes it (as
  // ModelOpt's quantizer config does; `quantize` adds them to the exclusions). Default: none.
  virtual std::vector<std::string> default_exclusions(const ModelConfig&) const { return {}; }
  // Tensors ("model.*" names) that transformers keeps in float32 whatever the checkpoint's dtype
  // (its _keep_in_fp32_modules_strict), which ModelOpt's export therefore writes as float32;
  // `quantize` writes a 16-bit one as float32 too. Default: none.
  virtual std::vector<std::string> float32_tensors(const ModelConfig&) const { return {}; }
  // Whether `quantize` lists model.embed_tokens among the unquantized modules, as ModelOpt's export
  // does for a plain nn.Embedding (a class its quantizer registry knows). Default: true; Gemma's
  // scaled embedding module is another class, which ModelOpt does not list.
  virtual bool lists_embedding_as_excluded() const { return true; }
  // The checkpoint's vision tower and projector (model/image_encoder.h), loaded from the same
  // directory; nullptr (the default) for a text-only architecture or a checkpoint without one.
  // Its tensors are then consumed, no longer on the load rule's ignore list.
  virtual std::unique_ptr<ImageEncoder> load_image_encoder(ModelLoader&) const { return nullptr; }
  // An architecture whose residual is several streams per token (DeepSeek-V4's hyper-connections,
  // model/layers/hyper_connection.h): what collapses them before the final norm; its streams() sets the
  // width of the residual the decoder layers see ([m, streams, hidden]). nullptr (the default):
  // one stream.
  virtual std::unique_ptr<HyperHead> load_hyper_head(ModelLoader&) const { return nullptr; }
  // Adds this architecture's own keys to the config.json of a small example model of sizes `o`
  // (the shared keys are already in c); the synthetic writer (src/synth) then writes the tensors
  // this architecture's plan_layer and layer_params name for that config.
  virtual void synthetic_config(const SampleShape& o, nlohmann::json& c) const = 0;
};

// The decoder layers before `cut` whose K/V some layer at or after `cut` reads (ArchDef::kv_source),
// ascending: what crosses a pipeline cut there beside the residual stream.
std::vector<int64_t> kv_read_across(const ModelConfig& c, int64_t cut);

// Every supported architecture, in registry order.
const std::vector<const ArchDef*>& architectures();
// The architecture named `hf_name` (a registered one first, see ArchRegistration), or nullptr.
const ArchDef* find_arch(std::string_view hf_name);

// Makes `def` known to find_arch for this object's lifetime: an architecture defined outside the
// registry (a test's block shape, an out-of-tree model). Not synchronized: register before loading.
class ArchRegistration {
 public:
  explicit ArchRegistration(const ArchDef& def);
  ~ArchRegistration();
  ArchRegistration(const ArchRegistration&) = delete;
  ArchRegistration& operator=(const ArchRegistration&) = delete;

 private:
  const ArchDef* def_;
};

}  // namespace fp4lm::model
