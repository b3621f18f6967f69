#include "model/load/model_loader.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"
#include "model/arch/arch.h"
#include "model/load/param_reader.h"
#include "model/quant_method/quant_method.h"
#include "quant/modelopt_config.h"

namespace fp4lm::model {

using kernels::LinearWeights;

std::string text_tensor_prefix(const ModelConfig& c, const io::Checkpoint& ckpt) {
  if (c.tensor_prefix == "model.language_model." && !ckpt.find("model.language_model.embed_tokens.weight")) {
    if (ckpt.find("language_model.model.embed_tokens.weight")) return "language_model.model.";
    // The layout transformers 4.x and the Qwen2-VL / Qwen2.5-VL releases store (model.*, visual.*).
    if (ckpt.find("model.embed_tokens.weight")) return "model.";
  }
  return c.tensor_prefix;
}

ModelLoader::ModelLoader(std::shared_ptr<io::Checkpoint> ckpt, EngineOptions opts)
    : ModelLoader(ckpt, std::move(opts), ckpt->config()) {}

ModelLoader::ModelLoader(std::shared_ptr<io::Checkpoint> ckpt, EngineOptions opts, const nlohmann::json& model_config,
                         const std::vector<std::pair<std::string, std::string>>& read_as)
    : ckpt_(std::move(ckpt)), opts_(std::move(opts)) {
  config_ = parse_model_config(model_config, ckpt_->dir() + "/config.json");
  quant_ = quant::parse_quant_config(ckpt_->hf_quant_config(), ckpt_->config(), ckpt_->dir());
  for (const auto& [stored, engine] : read_as) {
    ckpt_->alias_prefix(stored, engine);
    quant_ = quant_->with_prefix(stored, engine);
  }
  if (!config_.wrapper_prefix.empty()) {
    // The wrapper's language model: its tensors and quantization entries as if unwrapped.
    ckpt_->alias_prefix(config_.wrapper_prefix, "");
    quant_ = quant_->with_prefix(config_.wrapper_prefix, "");
  }
  config_.tensor_prefix = text_tensor_prefix(config_, *ckpt_);
  if (config_.tensor_prefix != "model.") {
    // A VL checkpoint: its text model's tensors and quantization entries are read as "model.*".
    ckpt_->alias_prefix(config_.tensor_prefix, "model.");
    quant_ = quant_->with_prefix(config_.tensor_prefix, "model.");
  }
  for (const auto& [engine, disk] : config_.tensor_renames) {
    ckpt_->alias_prefix(disk, engine);
    // A quantization entry names the module as stored (DeepSeek-V4's "head"), read through the
    // prefix step above: it applies to the engine's module (lm_head).
    if (!engine.ends_with(".weight") || !disk.ends_with(".weight")) continue;
    std::string stored = disk.substr(0, disk.size() - 7);
    if (config_.tensor_prefix != "model." && stored.starts_with(config_.tensor_prefix))
      stored = "model." + stored.substr(config_.tensor_prefix.size());
    quant_ = quant_->with_prefix(stored, engine.substr(0, engine.size() - 7));
  }
  dtype_ = resolve_dtype(opts_.dtype, config_.torch_dtype);
  layers_ = plan_layers(config_);
  if (quant_->quantized()) {
    log().info("Detected {}", quant_->describe());
    if (opts_.override_activation_dtype && quant_->declares(quant::Scheme::nvfp4))
      log().info("NVFP4 W4A16 override active (override_activation_dtype={}): running NVFP4 layers through the "
                 "W4A16 path",
                 dtype_torch_name(*opts_.override_activation_dtype));
    else if (opts_.dynamic_activation_scale && quant_->declares(quant::Scheme::nvfp4))
      log().info("NVFP4 W4A4 dynamic activation scale (--activation-scale dynamic): each token is quantized with its "
                 "own global scale, amax/2688; the checkpoint's input_scale is not used");
  }
  if (std::string w = config_disagreement(); !w.empty()) log().warn("{}", w);
  check_forced_backends();
}

std::string ModelLoader::config_disagreement() const {
  return config_warning(*quant_, layers_, tensor_lookup());
}

TensorLookup ModelLoader::tensor_lookup() const {
  return [ckpt = ckpt_](const std::string& name) -> std::optional<DType> {
    const TensorView* t = ckpt->find(name);
    return t ? std::optional<DType>(t->dtype) : std::nullopt;
  };
}

const LayerSpec& ModelLoader::layer(const std::string& name) const {
  for (const LayerSpec& s : layers_)
    if (s.name == name) return s;
  fail("{}: the model has no layer '{}'", ckpt_->dir(), name);
}

int64_t ModelLoader::plan_mtp_head() {
  const int64_t n = config_.num_layers;
  if (config_.num_nextn_predict_layers <= 0)
    fail("{}/config.json: the model has no MTP layers (mtp_num_hidden_layers / num_nextn_predict_layers is 0 or "
         "absent), so speculative method 'mtp' cannot draft",
         ckpt_->dir());
  if (!mtp_engine_prefix_.empty()) return n;
  if (!ckpt_->find("mtp.fc.weight"))
    fail("{}: config.json declares {} MTP layer(s) but the checkpoint has no tensor 'mtp.fc.weight'", ckpt_->dir(),
         config_.num_nextn_predict_layers);
  unquantized_ = quant::parse_quant_config(std::nullopt, nlohmann::json::object(), ckpt_->dir());
  mtp_engine_prefix_ = fmt::format("model.layers.{}.", n);
  ckpt_->alias_prefix("mtp.layers.0.", mtp_engine_prefix_);
  if (!config_.gdn.full_attention.empty()) config_.gdn.full_attention.push_back(true);
  config_.arch->plan_layer(config_, n, layers_);
  layers_.push_back(plan_linear("mtp.fc", n, {"mtp.fc"}, {config_.hidden_size}, 2 * config_.hidden_size));
  return n;
}

namespace {
// `spec` with the names the checkpoint's files use: the MTP layer's engine prefix back to mtp.layers.0.
LayerSpec on_disk_names(const LayerSpec& spec, const std::string& engine_prefix) {
  LayerSpec s = spec;
  auto undo = [&](std::string& name) {
    if (name.compare(0, engine_prefix.size(), engine_prefix) == 0) name = "mtp.layers.0." + name.substr(engine_prefix.size());
  };
  undo(s.name);
  for (std::string& shard : s.shards) undo(shard);
  return s;
}
}  // namespace

LayerReport ModelLoader::describe(const LayerSpec& spec) const {
  LayerReport r;
  r.spec = &spec;
  const bool extra = std::find(extra_layers_.begin(), extra_layers_.end(), spec.name) != extra_layers_.end();
  if (extra ||
      (!mtp_engine_prefix_.empty() && (spec.name.rfind(mtp_engine_prefix_, 0) == 0 || spec.name.rfind("mtp.", 0) == 0))) {
    const LayerSpec disk = extra ? spec : on_disk_names(spec, mtp_engine_prefix_);
    const auto quantized = [&](const std::string& m) {
      const TensorView* t = ckpt_->find(m + ".weight");
      return (t && t->dtype != DType::BF16 && t->dtype != DType::F16 && t->dtype != DType::F32) ||
             ckpt_->find(m + ".weight_scale") || ckpt_->find(m + ".weight_scale_inv") ||
             ckpt_->find(m + ".weight_packed");
    };
    const std::vector<std::string> mods = disk.modules();
    const bool unquantized = std::none_of(mods.begin(), mods.end(), quantized);
    r.scheme = resolve_scheme(unquantized ? *unquantized_ : *quant_, disk, opts_, dtype_, tensor_lookup());
  } else {
    r.scheme = resolve_scheme(*quant_, spec, opts_, dtype_, tensor_lookup());
  }
  if (spec.kind == kernels::LayerKind::linear) {
    kernels::LinearProblem p{r.scheme.key, r.scheme.act_dtype, spec.out_features, spec.in_features,
                             {opts_.a16_max_tokens}};
    r.selection = kernels::select_linear(p, spec.name, opts_.linear_backend);
  } else {
    kernels::MoeProblem p{r.scheme.key, r.scheme.act_dtype, spec.num_experts, config_.moe.top_k, spec.hidden, spec.inter,
                          {opts_.a16_max_tokens}, spec.expert_activation};
    r.selection = kernels::select_moe(p, spec.name, opts_.moe_backend);
  }
  return r;
}

// The scheme's quant method gathers and validates the parameters (model/quant_method/).
LinearWeights ModelLoader::linear_weights(const LayerSpec& spec, const LayerScheme& scheme) const {
  return quant_method(scheme.on_disk).linear(ParamReader(ckpt_), spec, scheme);
}

kernels::MoeWeights ModelLoader::moe_weights(const LayerSpec& spec, const LayerScheme& scheme) const {
  kernels::MoeWeights mw = quant_method(scheme.on_disk).moe(ParamReader(ckpt_), spec, scheme);
  // The grouped MoE kernels scale no expert's input: an expert's pre_quant_scale is refused by name
  // rather than run without it.
  if (spec.expert_layout != LayerSpec::ExpertLayout::gpt_oss)
    for (int64_t e = 0; e < spec.num_experts; ++e)
      for (const std::string& proj : spec.expert_proj) {
        for (const char* lora : {"weight_quantizer._svdquant_lora_a", "svdquant_lora_a"}) {
          const std::string l = fmt::format("{}.{}.{}.{}", spec.shards[0], e, proj, lora);
          if (ckpt_->find(l))
            fail("{}: tensor '{}': SVDQuant's low-rank branch on MoE experts ({}) is not supported; fp4lm adds it on "
                 "Linear layers only (docs/FORMAT.md, 'NVFP4_SVD')",
                 ckpt_->dir(), l, spec.name);
        }
        const std::string name = fmt::format("{}.{}.{}.pre_quant_scale", spec.shards[0], e, proj);
        if (ckpt_->find(name))
          fail("{}: tensor '{}': AWQ pre_quant_scale on MoE experts ({}) is not supported; fp4lm applies it on "
               "Linear layers only (docs/FORMAT.md, 'AWQ pre_quant_scale')",
               ckpt_->dir(), name, spec.name);
      }
  return mw;
}

std::vector<float> ModelLoader::pre_quant_scale(const LayerSpec& spec) const {
  return read_pre_quant_scale(ParamReader(ckpt_), spec);
}

void ModelLoader::log_once(const std::string& msg) {
  if (logged_.emplace(msg, true).second) log().info("{}", msg);
}

void ModelLoader::log_selection(const LayerReport& r) {
  log_once(kernels::selection_message(r.selection, r.spec->kind, r.scheme.key));
  if (r.scheme.key == kernels::kNvfp4W4A4 && r.selection.backend->weight_key_only)
    log().warn("{}: W4A16 backend '{}' forced on a W4A4 layer: activations will not be quantized", r.spec->name,
               r.selection.backend->name);
}

std::unique_ptr<Linear> ModelLoader::load_linear(const std::string& name) {
  const LayerSpec& spec = layer(name);
  if (spec.kind != kernels::LayerKind::linear) fail("layer {} is not a Linear layer", name);
  LayerReport r = describe(spec);
  log_selection(r);
  kernels::LinearProblem p{r.scheme.key, r.scheme.act_dtype, spec.out_features, spec.in_features,
                           {opts_.a16_max_tokens}};
  std::vector<float> pre_quant_scale = this->pre_quant_scale(spec);
  kernels::LinearWeights weights = linear_weights(spec, r.scheme);
  // W4A8_NVFP4_FP8 on a W4A16 backend: the FP8 activation pass runs in model::Linear (the
  // reference backend quantizes its own input).
  const float fp8_input_scale =
      (r.scheme.key == kernels::kNvfp4W4A8 || r.scheme.key == kernels::kMxfp4W4A8) && r.selection.backend->weight_key_only
          ? weights.input_scale
          : 0.0f;
  const float int8_input_scale = weights.input_scale;
  auto kernel = r.selection.backend->make_linear(std::move(weights), p);
  loaded_bytes_ += kernel->weight_bytes();
  auto linear = std::make_unique<Linear>(spec, r.scheme, r.selection.backend->name, std::move(kernel));
  if (!pre_quant_scale.empty()) {
    log_once("AWQ pre_quant_scale: the layers that store one multiply their input by it (per input channel, in "
             "the activation dtype) before it is quantized, as ModelOpt's input quantizer does");
    ++pre_quant_scaled_;
    linear->set_pre_quant_scale(std::move(pre_quant_scale));
  }
  {
    const bool svd = quant_->family() == quant::Family::modelopt &&
                     quant::module_algo(quant::as_modelopt(*quant_), spec.shards.front()) == quant::QuantAlgo::NVFP4_SVD;
    const std::optional<int> rank = quant_->family() == quant::Family::modelopt
                                        ? quant::as_modelopt(*quant_).lora_rank
                                        : std::nullopt;
    LowRankBranch branch = read_low_rank_branch(ParamReader(ckpt_), spec, svd, rank);
    if (!branch.empty()) {
      log_once("NVFP4_SVD: the layers that store SVDQuant's low-rank branch add (x' A^T) B^T, computed in the "
               "activation dtype on their input after pre_quant_scale (before it is quantized), to the quantized "
               "GEMM's output, as ModelOpt's SVDQuantLinear does");
      linear->set_low_rank_branch(std::move(branch));
    }
  }
  if (fp8_input_scale > 0 && r.scheme.key == kernels::kMxfp4W4A8) {
    log_once("W4A8_MXFP4_FP8: each layer's input is quantized to E4M3 with its static input_scale and dequantized "
             "before the MXFP4 W4A16 kernel, as ModelOpt's FP8 input quantizer does");
    linear->set_fp8_input_scale(fp8_input_scale);
  } else if (fp8_input_scale > 0) {
    log_once("W4A8_NVFP4_FP8: each layer's input is quantized to E4M3 with its static input_scale and dequantized "
             "(x -> e4m3(x / input_scale) * input_scale) before the NVFP4 W4A16 kernel, as ModelOpt's FP8 input "
             "quantizer does");
    linear->set_fp8_input_scale(fp8_input_scale);
  }
  if (r.scheme.key == kernels::kMxfp4W4A8Dynamic && r.selection.backend->weight_key_only) {
    log_once("W4A8_MXFP4_FP8 without input_scale (as ModelOpt's uncalibrated recipe exports it): each call's input is "
             "quantized to E4M3 with one scale, its amax / 448, and dequantized before the MXFP4 W4A16 kernel, as "
             "ModelOpt's per-tensor FP8 input quantizer does; the scale spans every token of the call");
    linear->set_fp8_per_tensor_dynamic(true);
  }
  if (r.scheme.key == kernels::kFp8PerToken && r.selection.backend->weight_key_only) {
    log_once("FP8_PER_CHANNEL_PER_TOKEN: each token's input is quantized to E4M3 with its own scale (amax / 448) and "
             "dequantized before the FP8 W8A16 kernel, as ModelOpt's dynamic per-token input quantizer does");
    linear->set_fp8_per_token(true);
  }
  if (r.scheme.key == kernels::kInt8W8A8 && r.selection.backend->weight_key_only) {
    log_once("W8A8_SQ_PER_CHANNEL: each layer's input (times its pre_quant_scale) is quantized to int8 with its static "
             "input_scale (round half even, clamp [-128, 127]) and dequantized before the int8 W8A16 kernel, as "
             "ModelOpt's int8 input quantizer does");
    linear->set_int8_input_scale(int8_input_scale);
  }
  if (r.scheme.key == kernels::kMxfp8 && r.selection.backend->weight_key_only) {
    log_once("MXFP8: each input is quantized to E4M3 with an E8M0 scale per 32 elements (ModelOpt's MXFP8QTensor "
             "rule) and dequantized before the block-FP8 W8A16 kernel; the CPU has no FP8 x FP8 arithmetic");
    linear->set_mxfp8_input(true);
  }
  if (opts_.on_linear_built) opts_.on_linear_built(*linear);
  return linear;
}

std::unique_ptr<Linear> ModelLoader::load_extra_linear(LayerSpec spec) {
  if (std::find(extra_layers_.begin(), extra_layers_.end(), spec.name) == extra_layers_.end()) {
    if (!unquantized_) unquantized_ = quant::parse_quant_config(std::nullopt, nlohmann::json::object(), ckpt_->dir());
    extra_layers_.push_back(spec.name);
    layers_.push_back(std::move(spec));
    return load_linear(layers_.back().name);
  }
  return load_linear(spec.name);
}

std::unique_ptr<FusedMoe> ModelLoader::load_moe(const std::string& name) {
  const LayerSpec& spec = layer(name);
  if (spec.kind != kernels::LayerKind::moe) fail("layer {} is not a MoE layer", name);
  LayerReport r = describe(spec);
  log_selection(r);
  kernels::MoeProblem p{r.scheme.key, r.scheme.act_dtype, spec.num_experts, config_.moe.top_k, spec.hidden, spec.inter,
                        {opts_.a16_max_tokens}, spec.expert_activation};
  if (r.scheme.key == kernels::kFp8PerToken && r.selection.backend->weight_key_only)
    log().warn("{}: FP8_PER_CHANNEL_PER_TOKEN experts on the W8A16 backend '{}': the experts' inputs are not quantized "
               "to FP8 (--moe-backend reference runs the per-token FP8 activations)",
               spec.name, r.selection.backend->name);
  if (r.scheme.key == kernels::kInt8W8A8 && r.selection.backend->weight_key_only)
    log().warn("{}: W8A8_SQ_PER_CHANNEL experts on the W8A16 backend '{}': the experts' inputs are not quantized "
               "to int8 (--moe-backend reference runs the int8 activations)",
               spec.name, r.selection.backend->name);
  if (r.scheme.key == kernels::kMxfp8 && r.selection.backend->weight_key_only)
    log().warn("{}: MXFP8 experts on the W8A16 backend '{}': the experts' inputs are not quantized to MXFP8 "
               "(--moe-backend reference runs the MXFP8 activations)",
               spec.name, r.selection.backend->name);
  if ((r.scheme.key == kernels::kMxfp4W4A8 || r.scheme.key == kernels::kMxfp4W4A8Dynamic) &&
      r.selection.backend->weight_key_only)
    log().warn("{}: W4A8_MXFP4_FP8 experts on the W4A16 backend '{}': the experts' inputs are not quantized to FP8 "
               "(--moe-backend reference runs the FP8 activations)",
               spec.name, r.selection.backend->name);
  if (r.scheme.key == kernels::kNvfp4W4A8 && r.selection.backend->weight_key_only)
    log().warn("{}: W4A8_NVFP4_FP8 experts on the W4A16 backend '{}': the experts' inputs are not quantized to FP8 "
               "(--moe-backend reference runs the FP8 activations; --override-activation-dtype bfloat16 says W4A16)",
               spec.name, r.selection.backend->name);
  auto kernel = r.selection.backend->make_moe(moe_weights(spec, r.scheme), p);
  loaded_bytes_ += kernel->weight_bytes();
  auto moe = std::make_unique<FusedMoe>(spec, r.scheme, r.selection.backend->name, std::move(kernel));
  if (opts_.on_moe_built) opts_.on_moe_built(*moe);
  return moe;
}

const TensorView& ModelLoader::tensor(const std::string& name, const Shape& expected) const {
  return ParamReader(ckpt_).require(name, {DType::F32, DType::BF16, DType::F16}, expected);
}

std::vector<float> ModelLoader::tensor_f32(const std::string& name, const Shape& expected) const {
  const TensorView& t = tensor(name, expected);
  std::vector<float> out(static_cast<size_t>(t.numel()));
  to_f32_n(t.data, t.dtype, out.data(), out.size());
  return out;
}

}  // namespace fp4lm::model
