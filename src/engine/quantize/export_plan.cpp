#include "engine/quantize/export_plan.h"

#include <algorithm>

#include <fmt/format.h>

#include "core/error.h"
#include "model/arch/arch.h"
#include "quant/nvfp4.h"

namespace fp4lm::engine {

using model::LayerSpec;
using quant::QuantAlgo;

const QuantGroup* ExportPlan::group_of_module(const std::string& module) const {
  auto it = group_index.find(module);
  return it == group_index.end() ? nullptr : &groups[it->second];
}

std::vector<std::string> ExportPlan::calibrated_layers() const {
  std::vector<std::string> out;
  for (const QuantGroup& g : groups)
    if (out.empty() || out.back() != g.layer) out.push_back(g.layer);
  return out;
}

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::BF16 || t == DType::F16; }

// The first --exclude pattern that excludes one of `modules`, or "".
std::string matching_pattern(const std::vector<std::string>& patterns, const std::vector<std::string>& modules) {
  for (const std::string& p : patterns)
    for (const std::string& m : modules)
      if (quant::pattern_excludes(p, m)) return p;
  return "";
}

void check_weight(const io::Checkpoint& ck, const std::string& module, int64_t rows, int64_t cols) {
  const std::string name = module + ".weight";
  const TensorView* t = ck.find(name);
  if (!t) fail("{}: missing tensor '{}' (expected shape [{}, {}])", ck.dir(), name, rows, cols);
  if (!is_float(t->dtype))
    fail("{}: tensor '{}': expected dtype F32, BF16 or F16, found {}", ck.file_of(name), name, dtype_name(t->dtype));
  if (t->shape != Shape{rows, cols})
    fail("{}: tensor '{}': expected shape [{}, {}], found {}", ck.file_of(name), name, rows, cols, shape_str(t->shape));
}

void check_unquantized_input(const io::Checkpoint& ck, const nlohmann::json& config) {
  if (ck.hf_quant_config() || (config.contains("quantization_config") && !config["quantization_config"].is_null()))
    fail("{}: the checkpoint is already quantized (it has {}); fp4lm quantize takes a bf16, fp16 or fp32 checkpoint",
         ck.dir(), ck.hf_quant_config() ? "hf_quant_config.json" : "config.json quantization_config");
  for (const std::string& name : ck.tensor_names()) {
    const TensorView& t = ck.get(name);
    if (t.dtype == DType::U8 || t.dtype == DType::F8_E4M3)
      fail("{}: tensor '{}' has dtype {}: the checkpoint looks quantized; fp4lm quantize takes a bf16, fp16 or "
           "fp32 checkpoint",
           ck.file_of(name), name, dtype_name(t.dtype));
  }
}

// gpt-oss's experts are fused input-major parameters with biases and an interleaved gate/up;
// ModelOpt's per-expert NVFP4 names cannot express them (OpenAI publishes them as MXFP4, which
// fp4lm runs as stored).
[[noreturn]] void refuse_gpt_oss(const io::Checkpoint& ck) {
  fail("{}: fp4lm quantize does not export gpt-oss (GptOssForCausalLM): its experts are published as MXFP4, "
       "which fp4lm runs as they are",
       ck.dir());
}

}  // namespace

void expose_fused_experts(io::Checkpoint& ck) {
  const model::ModelConfig c = model::parse_model_config(ck.config(), ck.dir() + "/config.json");
  for (const LayerSpec& spec : model::plan_layers(c)) {
    if (spec.kind != kernels::LayerKind::moe) continue;
    if (spec.expert_layout == LayerSpec::ExpertLayout::gpt_oss) refuse_gpt_oss(ck);
    const std::string& box = spec.shards[0];
    if (!ck.find(box + ".gate_up_proj")) continue;
    // Llama 4's fused experts are input-major ([E, D, 2I]): an expert's rows are not a slice of them.
    const TensorView* gu = ck.find(box + ".gate_up_proj");
    if (spec.fused_input_major ||
        (spec.fused_major_by_shape && gu->shape != Shape{spec.num_experts, 2 * spec.inter, spec.hidden}))
      fail("{}: fp4lm quantize does not export {}'s fused input-major experts ('{}.gate_up_proj' [E, hidden, 2 x "
           "intermediate]); fp4lm runs them unquantized as stored, and reads NVFP4 experts per expert",
           ck.dir(), c.architecture, box);
    for (const std::string& t : {box + ".gate_up_proj", box + ".down_proj"}) {
      const TensorView* v = ck.find(t);
      const Shape want = t.ends_with("gate_up_proj") ? Shape{spec.num_experts, 2 * spec.inter, spec.hidden}
                                                     : Shape{spec.num_experts, spec.hidden, spec.inter};
      if (!v) fail("{}: missing tensor '{}' (expected shape {})", ck.dir(), t, shape_str(want));
      if (v->shape != want)
        fail("{}: tensor '{}': expected shape {}, found {}", ck.file_of(t), t, shape_str(want), shape_str(v->shape));
    }
    for (int64_t e = 0; e < spec.num_experts; ++e) {
      const std::string b = fmt::format("{}.{}.", box, e);
      ck.alias_slice(b + spec.expert_proj[0] + ".weight", box + ".gate_up_proj", e, 0, spec.inter);
      ck.alias_slice(b + spec.expert_proj[1] + ".weight", box + ".gate_up_proj", e, spec.inter, spec.inter);
      ck.alias_slice(b + spec.expert_proj[2] + ".weight", box + ".down_proj", e, 0, spec.hidden);
    }
  }
}

namespace {

// A layer left unquantized: `listed` join the exclusions, the reason the notes.
void keep_unquantized(ExportPlan& plan, const LayerSpec& spec, const std::vector<std::string>& listed,
                      const std::string& reason) {
  plan.exclude_modules.insert(plan.exclude_modules.end(), listed.begin(), listed.end());
  plan.notes.push_back(fmt::format("{}: not quantized ({})", spec.name, reason));
}

// A Linear layer (its fused shards together): one quantization group, or kept with the reason.
void plan_linear(const io::Checkpoint& ck, const ExportOptions& opts, const LayerSpec& spec, ExportPlan& plan) {
  if (spec.tied_embedding) {
    // lm_head reads model.embed_tokens.weight: quantizing it would quantize the embedding too.
    keep_unquantized(plan, spec, {"lm_head"}, "tied to model.embed_tokens, which stays unquantized");
    return;
  }
  for (size_t i = 0; i < spec.shards.size(); ++i)
    check_weight(ck, spec.shards[i], spec.shard_rows[i], spec.in_features);
  std::vector<std::string> names = spec.shards;
  names.push_back(spec.name);
  std::string reason;
  if (spec.name == "lm_head" && !opts.quantize_lm_head) reason = "lm_head; --quantize-lm-head quantizes it";
  else if (std::string p = matching_pattern(opts.exclude, names); !p.empty())
    reason = matching_pattern(opts.exclude, {spec.name}).empty() &&
                     std::any_of(spec.shards.begin(), spec.shards.end(),
                                 [&](const std::string& m) { return !quant::is_excluded(opts.exclude, m); })
                 ? fmt::format("--exclude '{}' matches part of this fused group, which cannot mix formats", p)
                 : fmt::format("--exclude '{}'", p);
  else if (spec.in_features % quant::kNvfp4BlockSize != 0)
    reason = fmt::format("in_features {} is not a multiple of 16", spec.in_features);
  if (!reason.empty()) {
    keep_unquantized(plan, spec, spec.shards, reason);
    return;
  }
  plan.groups.push_back({spec.name, GroupInput::linear, spec.shards, spec.shard_rows, spec.in_features});
}

// A MoE experts layer: all experts share one format (the engine runs them as one kernel); two
// groups per expert (w1/w3 together, w2), or the layer kept with the reason.
void plan_experts(const io::Checkpoint& ck, const ExportOptions& opts, const LayerSpec& spec, ExportPlan& plan) {
  if (spec.expert_layout == LayerSpec::ExpertLayout::gpt_oss) refuse_gpt_oss(ck);
  const std::string& box = spec.shards[0];
  if (ck.find(box + ".gate_up_proj")) plan.fused_experts.push_back(box);
  std::vector<std::string> modules = spec.modules();
  for (int64_t e = 0; e < spec.num_experts; ++e) {
    const std::string b = fmt::format("{}.{}.", box, e);
    check_weight(ck, b + spec.expert_proj[0], spec.inter, spec.hidden);
    check_weight(ck, b + spec.expert_proj[1], spec.inter, spec.hidden);
    check_weight(ck, b + spec.expert_proj[2], spec.hidden, spec.inter);
  }
  std::vector<std::string> names = modules;
  names.push_back(box);
  std::string reason;
  if (std::string p = matching_pattern(opts.exclude, names); !p.empty())
    reason = fmt::format("--exclude '{}' matches its experts", p);
  else if (spec.hidden % quant::kNvfp4BlockSize != 0 || spec.inter % quant::kNvfp4BlockSize != 0)
    reason = fmt::format("hidden {} / moe_intermediate {}: not both multiples of 16", spec.hidden, spec.inter);
  if (!reason.empty()) {
    keep_unquantized(plan, spec, {box}, reason);
    return;
  }
  for (int64_t e = 0; e < spec.num_experts; ++e) {
    const std::string b = fmt::format("{}.{}.", box, e);
    plan.groups.push_back({spec.name, GroupInput::experts_w13, {b + spec.expert_proj[0], b + spec.expert_proj[1]},
                           {spec.inter, spec.inter}, spec.hidden});
  }
  for (int64_t e = 0; e < spec.num_experts; ++e) {
    const std::string b = fmt::format("{}.{}.", box, e);
    plan.groups.push_back({spec.name, GroupInput::experts_w2, {b + spec.expert_proj[2]}, {spec.hidden}, spec.inter});
  }
}

// The architecture's default exclusions and the tensors fp4lm copies unchanged.
void add_default_exclusions(const io::Checkpoint& ck, ExportPlan& plan) {
  // The architecture's default exclusions (ModelOpt's quantizer config disables, e.g., the
  // hybrids' *linear_attn.conv1d*; its routers and gates are planned as such), and, as hf_ptq
  // leaves mtp and the vision tower unquantized, the multi-token-prediction and vision tensors,
  // which fp4lm copies unchanged, by pattern.
  for (std::string& m : plan.config.arch->default_exclusions(plan.config))
    if (std::find(plan.exclude_modules.begin(), plan.exclude_modules.end(), m) == plan.exclude_modules.end())
      plan.exclude_modules.push_back(std::move(m));
  bool mtp = false, visual = false, top_visual = false;
  for (const std::string& name : ck.tensor_names()) {
    mtp |= name.rfind("mtp.", 0) == 0;
    visual |= name.rfind("model.visual.", 0) == 0;
    top_visual |= name.rfind("visual.", 0) == 0;  // Qwen2-VL / Qwen2.5-VL's published layout
  }
  if (mtp) plan.exclude_modules.push_back("mtp*");
  if (visual) plan.exclude_modules.push_back("model.visual*");
  if (top_visual) plan.exclude_modules.push_back("visual*");
}

}  // namespace

ExportPlan make_export_plan(const io::Checkpoint& ck, const ExportOptions& opts) {
  if (opts.algo != QuantAlgo::NVFP4 && opts.algo != QuantAlgo::W4A16_NVFP4)
    fail("fp4lm quantize writes NVFP4 or W4A16_NVFP4, not {}", quant::algo_name(opts.algo));
  ExportPlan plan;
  plan.config = model::parse_model_config(ck.config(), ck.dir() + "/config.json");
  check_unquantized_input(ck, ck.config());
  if (!plan.config.wrapper_prefix.empty())
    fail("{}: fp4lm quantize does not export {} (a multi-modal wrapper, its language model under {}*); quantize "
         "the language model alone",
         ck.dir(), plan.config.architecture, plan.config.wrapper_prefix);
  // ModelOpt's export lists the embedding among the unquantized modules when it is a plain
  // nn.Embedding (nvidia-modelopt 0.47, scripts/validate_modelopt.py); so does fp4lm, so the two
  // exports' lists agree.
  if (plan.config.arch->lists_embedding_as_excluded()) plan.exclude_modules.emplace_back("model.embed_tokens");
  plan.layers = model::plan_layers(plan.config);
  // The architecture's default exclusions that are Linears stay unquantized, not only listed
  // (DeepSeek-V3's kv_b_proj was written quantized under an exclude_modules entry naming it).
  const std::vector<std::string> arch_excluded = plan.config.arch->default_exclusions(plan.config);

  for (const LayerSpec& spec : plan.layers) {
    if (spec.kind == kernels::LayerKind::linear && !spec.router &&
        std::find(arch_excluded.begin(), arch_excluded.end(), spec.name) != arch_excluded.end()) {
      keep_unquantized(plan, spec, spec.shards, fmt::format("{}'s default exclusion", plan.config.architecture));
    } else if (spec.router) {  // routers (and the GDN's in_proj_b / in_proj_a) stay in their dtype
      for (size_t i = 0; i < spec.shards.size(); ++i) {
        check_weight(ck, spec.shards[i], spec.shard_rows[i], spec.in_features);
        plan.exclude_modules.push_back(spec.shards[i]);
      }
    } else if (spec.kind == kernels::LayerKind::linear) {
      plan_linear(ck, opts, spec, plan);
    } else {
      plan_experts(ck, opts, spec, plan);
    }
  }
  add_default_exclusions(ck, plan);
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    plan.lm_head_quantized |= plan.groups[i].layer == "lm_head";
    for (const std::string& m : plan.groups[i].modules) plan.group_index[m] = i;
  }
  return plan;
}

}  // namespace fp4lm::engine
