// `fp4lm inspect --model DIR [--json]`: what a checkpoint is (architecture, main dimensions, dtype,
// quantization summary) and what it holds (tensors and bytes per dtype). The facts are gathered
// into one JSON object (inspect_facts) that --json prints as is and the human form lays out.
#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "io/checkpoint.h"
#include "cli/engine_flags.h"
#include "io/json_file.h"
#include "kernels/cpu/reference/math.h"
#include "model/causal_lm.h"
#include "model/layers/compressed_attention.h"
#include "model/engine_options.h"
#include "model/state/kv_cache_format.h"
#include "model/load/memory_fit.h"
#include "model/load/model_loader.h"
#include "model/state/state_bytes.h"
#include "quant/compressed_tensors_config.h"
#include "quant/fine_grained_fp8_config.h"
#include "quant/int4_producer_config.h"
#include "quant/mxfp4_config.h"
#include "quant/modelopt_config.h"

namespace fp4lm::cli {
namespace {

using nlohmann::json;

// Inspect reports its facts on stdout; the loads it runs to find them log nothing below WARN.
struct QuietLog {
  spdlog::level::level_enum old = log().level();
  QuietLog() { log().set_level(std::max(old, spdlog::level::warn)); }
  ~QuietLog() { log().set_level(old); }
};

// A config value as written (any JSON type), or null when absent. The model layer owns the real
// config parsing; inspect reports what the file says.
json field(const json& obj, const char* key) {
  auto it = obj.find(key);
  return it == obj.end() ? json(nullptr) : *it;
}

json first_of(const json& obj, std::initializer_list<const char*> keys) {
  for (const char* k : keys)
    if (auto v = field(obj, k); !v.is_null()) return v;
  return nullptr;
}

// The quantization summary, parsed by the engine's own config reader (so a bad config fails here
// exactly as it would at load); null for an unquantized checkpoint. "family" names the producer's
// config format and "config" the engine's one-line reading of it; the rest is the family's own.
// When ModelOpt's two config files disagree, "config_disagreement" says so (the loader's WARN;
// here without the tensors' decisions, which add_layers() fills in when the layers resolve).
json modelopt_summary(const quant::ModeloptConfig& q) {
  json s = {{"quant_algo", std::string(quant::algo_name(q.algo))},
            {"group_size", q.group_size ? json(*q.group_size) : json(nullptr)},
            {"pre_quant_scale", q.pre_quant_scale},
            {"kv_cache_quant_algo", q.kv_cache_quant_algo ? json(*q.kv_cache_quant_algo) : json(nullptr)},
            {"exclude_modules", q.exclude_modules},
            {"source", q.source_path.size() >= 20 && q.source_path.ends_with("hf_quant_config.json")
                           ? "hf_quant_config.json"
                           : "config.json"},
            {"config_disagreement", nullptr}};
  if (q.other)
    s["config_disagreement"] =
        fmt::format("{} and {} disagree ({})", q.source_path, q.other->source_path, q.disagreement);
  return s;
}

json compressed_tensors_summary(const quant::CompressedTensorsConfig& q) {
  json groups = json::array(), ignore = json::array();
  for (const quant::CtGroup& g : q.groups) {
    json targets = json::array();
    for (const quant::CtTarget& t : g.targets) targets.push_back(t.text);
    groups.push_back({{"name", g.name},
                      {"targets", targets},
                      {"scheme", g.scheme ? json(std::string(quant::scheme_name(*g.scheme))) : json(nullptr)},
                      {"description", g.scheme ? g.description : g.unsupported}});
  }
  for (const quant::CtTarget& t : q.ignore) ignore.push_back(t.text);
  return {{"format", q.format},
          {"config_groups", groups},
          {"ignore", ignore},
          {"kv_cache_scheme", q.kv_cache ? json(*q.kv_cache) : json(nullptr)},
          {"source", "config.json"}};
}

json fine_grained_fp8_summary(const quant::FineGrainedFp8Config& q) {
  return {{"weight_block_size", {q.block_n, q.block_k}},
          {"activation_scheme", "dynamic"},
          {"modules_to_not_convert", q.not_converted},
          {"source", "config.json"}};
}

json mxfp4_summary(const quant::Mxfp4Config& q) {
  return {{"modules_to_not_convert", q.not_converted}, {"source", "config.json"}};
}

json int4_producer_summary(const quant::Int4ProducerConfig& q) {
  return {{"bits", 4},
          {"group_size", q.group_size},
          {"sym", q.sym},
          {"desc_act", q.desc_act},
          {"version", q.version},
          {"zero_points_stored_minus_one", q.zeros_minus_one},
          {"modules_to_not_convert", q.not_converted},
          {"source", "config.json"}};
}

json quantization_summary(const quant::QuantConfig& q, const model::EngineOptions& opts) {
  if (!q.quantized()) return nullptr;
  json s;
  switch (q.family()) {
    case quant::Family::modelopt: s = modelopt_summary(quant::as_modelopt(q)); break;
    case quant::Family::compressed_tensors:
      s = compressed_tensors_summary(dynamic_cast<const quant::CompressedTensorsConfig&>(q));
      break;
    case quant::Family::fine_grained_fp8:
      s = fine_grained_fp8_summary(dynamic_cast<const quant::FineGrainedFp8Config&>(q));
      break;
    case quant::Family::mxfp4: s = mxfp4_summary(dynamic_cast<const quant::Mxfp4Config&>(q)); break;
    case quant::Family::gptq:
    case quant::Family::awq: s = int4_producer_summary(dynamic_cast<const quant::Int4ProducerConfig&>(q)); break;
  }
  s["family"] = std::string(quant::family_name(q.family()));
  s["config"] = q.describe();
  s["override_activation_dtype"] =
      opts.override_activation_dtype ? std::string(dtype_torch_name(*opts.override_activation_dtype)) : "auto";
  // NVFP4 W4A4 layers' activation global scale: the file's input_scale, or each token's own.
  s["activation_scale"] = opts.dynamic_activation_scale ? "dynamic per token" : "static";
  return s;
}

// One entry per engine layer in model order: what is on disk, the scheme that runs, and the
// oracle's choice. Every layer's parameters are validated as the loader would.
// `weight_bytes`: what the layers' kernels will hold (their weights as loaded).
// Each decoder layer's row of the attention table (model/attention_table.h), as inspect's JSON
// reports it: its kind and, for an attention layer, window (sliding or chunk), heads, K/V source
// and RoPE base (null: NoPE).
json attention_report(const model::AttentionTable& t) {
  json out = json::array();
  for (const model::AttentionLayerSpec& a : t.layers()) {
    json row = {{"kind", model::attention_kind_name(a.kind)}};
    if (a.kind != model::AttentionKind::none) {
      row["window"] = a.window;
      row["head_dim"] = a.head_dim;
      row["kv_heads"] = a.kv_heads;
      row["kv_source"] = a.kv_source;
      row["rope_theta"] = a.rope ? json(a.rope_theta) : json(nullptr);
    }
    out.push_back(row);
  }
  return out;
}

// The attention report in one line: how many layers of each kind, window and head shape, in the
// order they first appear ("5 sliding 512 (head_dim 256, 16 KV heads), 1 full (...)").
std::string attention_summary(const json& layers) {
  std::vector<std::pair<std::string, int>> groups;
  for (const json& a : layers) {
    std::string d = a["kind"].get<std::string>();
    if (a["kind"] != "none") {
      if (a["window"].get<int64_t>() > 0) d += fmt::format(" {}", a["window"].get<int64_t>());
      d += fmt::format(" (head_dim {}, {} KV heads{}{})", a["head_dim"].get<int64_t>(), a["kv_heads"].get<int64_t>(),
                       a["rope_theta"].is_null() ? ", NoPE" : "", a["kv_source"].get<int64_t>() >= 0 ? ", shared K/V" : "");
    }
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == d; });
    if (it == groups.end()) groups.emplace_back(d, 1);
    else ++it->second;
  }
  std::string out;
  for (const auto& [d, n] : groups) out += fmt::format("{}{} {}", out.empty() ? "" : ", ", n, d);
  return out;
}

json layer_report(const model::ModelLoader& loader, size_t& weight_bytes) {
  json layers = json::array();
  weight_bytes = 0;
  for (const model::LayerSpec& spec : loader.layers()) {
    model::LayerReport r = loader.describe(spec);
    if (spec.kind == kernels::LayerKind::linear) {
      weight_bytes += kernels::linear_weight_bytes(loader.linear_weights(spec, r.scheme));
    } else {
      const kernels::MoeWeights ws = loader.moe_weights(spec, r.scheme);
      for (const auto* part : {&ws.w13, &ws.w2})
        for (const kernels::LinearWeights& w : *part) weight_bytes += kernels::linear_weight_bytes(w);
    }
    layers.push_back({{"name", spec.name},
                      {"kind", spec.kind == kernels::LayerKind::linear ? "linear" : "moe"},
                      {"shards", spec.shards},
                      {"on_disk", std::string(quant::scheme_name(r.scheme.on_disk.scheme))},
                      // whose tensor names hold it, and the quant method that reads them
                      {"format", r.scheme.on_disk.scheme == quant::Scheme::unquantized
                                     ? std::string("unquantized")
                                     : fmt::format("{} {}", quant::family_name(r.scheme.on_disk.family),
                                                   quant::scheme_name(r.scheme.on_disk.scheme))},
                      {"scheme", std::string(kernels::scheme_name(r.scheme.key))},
                      {"activation_dtype", std::string(dtype_torch_name(r.scheme.act_dtype))},
                      {"backend", r.selection.backend->name},
                      {"candidates", r.selection.candidates}});
  }
  return layers;
}

json inspect_facts(const std::shared_ptr<io::Checkpoint>& ckp, const model::EngineOptions& opts) {
  const io::Checkpoint& ck = *ckp;
  // VL checkpoints (Qwen3.5 ConditionalGeneration) keep the text model's keys in text_config.
  const json& top = ck.config();
  const json& c = top.contains("text_config") && top["text_config"].is_object() ? top["text_config"] : top;
  json arch = field(top, "architectures");
  if (arch.is_array()) arch = arch.empty() ? json(nullptr) : arch[0];

  std::map<std::string, size_t> bytes, counts;
  size_t total = 0, n = 0;
  for (const auto& name : ck.tensor_names()) {
    const TensorView& v = ck.get(name);
    std::string dt(dtype_name(v.dtype));
    bytes[dt] += v.nbytes;
    counts[dt] += 1;
    total += v.nbytes;
    ++n;
  }
  return {
      {"model", ck.dir()},
      {"architecture", arch},
      {"num_layers", field(c, "num_hidden_layers")},
      {"hidden_size", field(c, "hidden_size")},
      {"intermediate_size", field(c, "intermediate_size")},
      {"moe_intermediate_size", field(c, "moe_intermediate_size")},
      {"num_experts", first_of(c, {"num_experts", "num_local_experts"})},
      {"num_experts_per_tok", field(c, "num_experts_per_tok")},
      {"num_attention_heads", field(c, "num_attention_heads")},
      {"num_key_value_heads", field(c, "num_key_value_heads")},
      {"head_dim", field(c, "head_dim")},
      {"vocab_size", field(c, "vocab_size")},
      {"torch_dtype", first_of(top, {"torch_dtype", "dtype"})},
      {"quantization", quantization_summary(*quant::parse_quant_config(ck.hf_quant_config(), top, ck.dir()), opts)},
      {"tensor_count", n},
      {"bytes_by_dtype", bytes},
      {"tensors_by_dtype", counts},
      {"total_bytes", total},
  };
}

// RAM a run needs: the layers' weights, the embedding table (mapped as stored), float32 copies
// (norms, MLA's dequantized kv_b_proj, DeepSeek-V4's wo_a unless NVFP4), and one sequence's state as the loaded model's layers
// declared it (model/state/state_layout.h: the KV slots, MLA's latent, sliding-window rings, shared K/V
// stored once, recurrent state): what the engine reserves per sequence. `lm`: the model loaded
// as `generate` would (null when that load failed: `why`).
json memory_estimate(const model::ModelLoader& loader, const std::shared_ptr<io::Checkpoint>& ck,
                     const model::EngineOptions& opts, size_t layer_weights, const model::CausalLM* lm,
                     const std::string& why) {
  const model::ModelConfig& c = loader.config();
  size_t weights = layer_weights, floats = static_cast<size_t>(c.hidden_size);
  if (!c.tie_word_embeddings) weights += loader.tensor("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}).nbytes;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    floats += 2 * static_cast<size_t>(c.hidden_size);
    if (c.mla.enabled())
      floats += static_cast<size_t>(c.num_heads * (c.mla.qk_nope_head_dim + c.mla.v_head_dim) * c.mla.kv_lora_rank);
  }
  weights += floats * sizeof(float);
  for (int64_t i = 0; c.deepseek_v4.enabled() && i < c.num_layers; ++i) weights += model::deepseek_v4_wo_a_float_bytes(loader, i);
  // The KV format as the load resolves it (model/state/kv_cache_format.h); a declared format fp4lm does
  // not run under "auto" is shown with the refusal and counted at the activation dtype (the state
  // of a load with --kv-cache-dtype set to it).
  std::string kv_refused;
  try {
    QuietLog quiet;
    model::resolve_kv_cache_format(loader.quant_config().kv_cache_scheme(), opts.kv_cache_dtype, loader.dtype(),
                                   loader.quant_config().source());
  } catch (const Error& e) {
    kv_refused = e.what();
  }
  std::unique_ptr<model::CausalLM> as_activation_dtype;
  std::string state_unavailable = lm ? "" : why;
  if (!lm && !kv_refused.empty()) {
    model::EngineOptions o = opts;
    o.kv_cache_dtype = std::string(dtype_torch_name(loader.dtype()));
    model::LoadOptions lo;
    lo.progress = false;
    lo.enforce_tensor_usage = false;
    try {
      QuietLog quiet;
      as_activation_dtype = model::CausalLM::load(ck, o, lo);
      lm = as_activation_dtype.get();
      state_unavailable.clear();
    } catch (const Error& e) {
      state_unavailable = e.what();
    }
  }
  const int64_t ctx = std::min<int64_t>(c.max_position_embeddings, 8192);
  json m = {{"weights_bytes", weights},
            {"kv_bytes_per_token", nullptr},
            {"state_fixed_bytes", nullptr},
            {"sequence_bytes_at_default_context", nullptr},
            {"kv_dtype", nullptr},
            {"kv_declared", loader.quant_config().kv_cache_scheme() ? json(*loader.quant_config().kv_cache_scheme())
                                                                    : json(nullptr)},
            {"kv_refused", kv_refused.empty() ? json(nullptr) : json(kv_refused)},
            {"default_context", ctx},
            {"total_at_default_context_bytes", nullptr},
            {"machine_ram_bytes", model::physical_ram_bytes()}};
  if (!lm) {
    m["state_unavailable"] = state_unavailable;
    return m;
  }
  const model::StateLayout& s = lm->state_layout();
  const int64_t positions = std::min(ctx, lm->max_model_len());
  const size_t sequence = lm->sequence_bytes(positions);
  m["default_context"] = positions;
  m["kv_bytes_per_token"] = model::state_bytes_per_position(s, lm->kv_dtype());
  m["state_fixed_bytes"] = model::state_fixed_bytes(s, lm->prefill_chunk(), lm->kv_dtype());
  m["sequence_bytes_at_default_context"] = sequence;
  m["kv_dtype"] = lm->kv_format_name();
  m["total_at_default_context_bytes"] = weights + sequence;
  return m;
}

// The load rule's lists (model/load/tensor_usage.h) from a load of the whole model that reports
// instead of enforcing: what no layer consumed, sorted into the documented ignore list, unused
// quantization tensors (the load's error) and unused model tensors (its WARN line).
void add_tensor_usage(json& facts, const model::CausalLM* lm, const std::string& why) {
  if (!lm) {
    facts["tensor_usage"] = {{"unavailable", why}};
    return;
  }
  const model::TensorUsage& u = lm->tensor_usage();
  json ignored = json::object();
  for (const auto& [why_ignored, names] : u.ignored) ignored[why_ignored] = names;
  facts["tensor_usage"] = {
      {"ignored", ignored}, {"unused_quantization", u.unused_quantization}, {"unused_model", u.unused_model}};
}

// The per-layer report needs a supported, complete architecture; inspect still describes other
// checkpoints and says why it has no layer report (then exits 1: the loader refuses them).
void add_layers(json& facts, const std::shared_ptr<io::Checkpoint>& ck, const model::EngineOptions& opts) {
  try {
    model::parse_model_config(ck->config(), ck->dir() + "/config.json");
  } catch (const Error& e) {
    facts["layers"] = nullptr;
    facts["layers_unavailable"] = e.what();
    return;
  }
  model::ModelLoader loader(ck, opts);
  // Hybrid models: each decoder layer's mixer.
  if (loader.config().is_hybrid()) {
    json types = json::array();
    for (int64_t i = 0; i < loader.config().num_layers; ++i)
      types.push_back(loader.config().layer_is_attention(i) ? "full_attention" : "linear_attention");
    facts["layer_types"] = types;
  }
  facts["attention"] = attention_report(loader.config().attention);
  size_t weights = 0;
  facts["layers"] = layer_report(loader, weights);
  // One load of the whole model that reports instead of enforcing the load rule: its tensor
  // usage and its state layout.
  std::unique_ptr<model::CausalLM> lm;
  std::string why;
  model::LoadOptions lo;
  lo.progress = false;
  lo.enforce_tensor_usage = false;
  try {
    QuietLog quiet;
    lm = model::CausalLM::load(ck, opts, lo);
  } catch (const Error& e) {
    why = e.what();
  }
  facts["memory"] = memory_estimate(loader, ck, opts, weights, lm.get(), why);
  if (std::string d = loader.config_disagreement(); !d.empty() && facts["quantization"].is_object())
    facts["quantization"]["config_disagreement"] = d;
  add_tensor_usage(facts, lm.get(), why);
}

// A JSON value for a human: strings bare, lists comma-separated, null as "-".
std::string plain(const json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_array()) {
    std::string s;
    for (const auto& e : v) s += (s.empty() ? "" : ", ") + plain(e);
    return s.empty() ? "(none)" : s;
  }
  return v.dump();
}

std::string human_bytes(size_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  return u == 0 ? fmt::format("{} bytes", n) : fmt::format("{} bytes ({:.1f} {})", n, v, units[u]);
}

void print_human(const json& f, std::FILE* out) {
  auto line = [&](const std::string& label, const std::string& value) {
    fmt::print(out, "{:<22}{}\n", label, value);
  };
  auto line_if = [&](const std::string& label, const json& v) {
    if (!v.is_null()) line(label, plain(v));
  };
  line("model", plain(f["model"]));
  if (f.contains("source")) line("source", plain(f["source"]["origin"]));
  line("architecture", plain(f["architecture"]));
  line("layers", plain(f["num_layers"]));
  line("hidden size", plain(f["hidden_size"]));
  line("intermediate size", plain(f["intermediate_size"]));
  line_if("moe intermediate size", f["moe_intermediate_size"]);
  line_if("experts", f["num_experts"]);
  line_if("experts per token", f["num_experts_per_tok"]);
  line("attention heads", plain(f["num_attention_heads"]));
  line("kv heads", plain(f["num_key_value_heads"]));
  line_if("head dim", f["head_dim"]);
  line("vocab size", plain(f["vocab_size"]));
  line("torch dtype", plain(f["torch_dtype"]));
  const json& q = f["quantization"];
  if (q.is_null()) {
    line("quantization", "none");
  } else {
    if (field(q, "family") == "modelopt") {
      line("quantization", fmt::format("{} (from {})", plain(field(q, "quant_algo")), plain(field(q, "source"))));
      line("  config family", "modelopt");
      line("  group size", plain(field(q, "group_size")));
      line("  kv cache", plain(field(q, "kv_cache_quant_algo")));
      line("  exclude", plain(field(q, "exclude_modules")));
    } else if (field(q, "family") == "fp8") {
      line("quantization", fmt::format("block-wise FP8 {} (from {})", plain(field(q, "weight_block_size")),
                                       plain(field(q, "source"))));
      line("  config family", "fp8");
      line("  not converted", plain(field(q, "modules_to_not_convert")));
    } else if (field(q, "family") == "mxfp4") {
      line("quantization", fmt::format("MXFP4 MoE experts (from {})", plain(field(q, "source"))));
      line("  config family", "mxfp4");
      line("  not converted", plain(field(q, "modules_to_not_convert")));
    } else {
      line("quantization", fmt::format("{} (from {})", plain(field(q, "format")), plain(field(q, "source"))));
      line("  config family", plain(field(q, "family")));
      for (const json& g : q["config_groups"])
        line("  group " + field(g, "name").get<std::string>(),
             fmt::format("{} -> {}", plain(field(g, "targets")), plain(field(g, "description"))));
      line("  kv cache", plain(field(q, "kv_cache_scheme")));
      line("  ignore", plain(field(q, "ignore")));
    }
    line("  override act dtype", plain(field(q, "override_activation_dtype")));
    line("  activation scale", plain(field(q, "activation_scale")));
    line_if("  files disagree", field(q, "config_disagreement"));
  }
  line("tensors", plain(f["tensor_count"]));
  for (const auto& [dt, count] : f["tensors_by_dtype"].items())
    line("  " + dt, fmt::format("{} tensors, {}", count.get<size_t>(),
                                human_bytes(f["bytes_by_dtype"][dt].get<size_t>())));
  line("total bytes", human_bytes(f["total_bytes"].get<size_t>()));
  if (f["layers"].is_null()) {
    line("layer report", "unavailable: " + plain(f["layers_unavailable"]));
    return;
  }
  if (f.contains("layer_types")) line("layer types", plain(f["layer_types"]));
  if (f.contains("attention")) line("attention", attention_summary(f["attention"]));
  if (f.contains("memory") && f["memory"].contains("state_unavailable")) {
    line("RAM needed", fmt::format("weights {}; per-sequence state unavailable: {}",
                                   human_bytes(f["memory"]["weights_bytes"].get<size_t>()),
                                   plain(f["memory"]["state_unavailable"])));
  } else if (f.contains("memory")) {
    const json& m = f["memory"];
    const size_t fixed = m["state_fixed_bytes"].get<size_t>();
    line("RAM needed", fmt::format("weights {} + KV cache {} per token ({}){}; {} at {} tokens; this machine has {}",
                                   human_bytes(m["weights_bytes"].get<size_t>()),
                                   human_bytes(m["kv_bytes_per_token"].get<size_t>()), plain(m["kv_dtype"]),
                                   fixed ? fmt::format(" + {} per sequence (sliding windows, chunked layers' rings, recurrent state)",
                                                       human_bytes(fixed))
                                         : std::string(),
                                   human_bytes(m["total_at_default_context_bytes"].get<size_t>()),
                                   plain(m["default_context"]), human_bytes(m["machine_ram_bytes"].get<size_t>())));
  }
  if (f.contains("memory") && !f["memory"]["kv_declared"].is_null())
    line("  kv cache format", fmt::format("declared {}; {}", plain(f["memory"]["kv_declared"]),
                                          f["memory"]["kv_refused"].is_null() ? "runs as " + plain(f["memory"]["kv_dtype"])
                                                                              : plain(f["memory"]["kv_refused"])));
  if (f.contains("tensor_usage")) {
    const json& u = f["tensor_usage"];
    if (u.contains("unavailable")) {
      line("tensor usage", "unavailable: " + plain(u["unavailable"]));
    } else {
      line("unused quant tensors", u["unused_quantization"].empty() ? "none" : plain(u["unused_quantization"]) + " (the load refuses them)");
      line("unused model tensors", u["unused_model"].empty() ? "none" : plain(u["unused_model"]) + " (the load warns)");
      for (const auto& [why, names] : u["ignored"].items())
        line("ignored", fmt::format("{} tensor(s): {}", names.size(), why));
    }
  }
  fmt::print(out, "\n{:<44} {:<12} {:<12} {:<9} {}\n", "layer", "on disk", "scheme", "act", "backend");
  for (const json& l : f["layers"])
    fmt::print(out, "{:<44} {:<12} {:<12} {:<9} {}\n", l["name"].get<std::string>(), l["on_disk"].get<std::string>(),
               l["scheme"].get<std::string>(), l["activation_dtype"].get<std::string>(),
               l["backend"].get<std::string>());
}

CommandRegistration reg(
    "inspect", "Describe a checkpoint: architecture, dimensions, quantization, tensors",
    [](CLI::App& sub) {
      struct Opts {
        std::string model;
        bool json = false;
        EngineFlags engine;
        ModelFlags hub;
      };
      auto o = std::make_shared<Opts>();
      add_engine_flags(sub, o->engine);
      add_model_flags(sub, o->model, o->hub, "Checkpoint directory (config.json + safetensors)");
      sub.add_flag("--json", o->json, "print the facts as one JSON object");
      return [o]() -> int {
        const model::EngineOptions opts = o->engine.config().model;
        o->hub.resolve(o->model);
        auto ck = io::Checkpoint::open(o->model);
        json facts = inspect_facts(ck, opts);
        const io::ModelSource& src = o->hub.source;  // where the files came from
        facts["source"] = {{"kind", src.is_hub() ? "hub" : "directory"}, {"origin", src.origin}};
        if (src.is_hub())
          facts["source"].update({{"repo_id", src.repo_id}, {"revision", src.revision}, {"commit", src.commit},
                                  {"downloaded_files", src.downloaded_files}, {"downloaded_bytes", src.downloaded_bytes}});
        add_layers(facts, ck, opts);
        if (o->json)
          fmt::print("{}\n", facts.dump(2));
        else
          print_human(facts, stdout);
        // The facts help to see why; the exit status says the checkpoint cannot be loaded.
        if (facts["layers"].is_null())
          fail("{} (the checkpoint is described above, but fp4lm cannot load it)",
               facts["layers_unavailable"].get<std::string>());
        // The load `generate` makes, so inspect refuses exactly what it refuses (a missing final
        // norm, a NaN E4M3 scale byte: checks the loader and the kernels make as they prepare).
        // Quietly: the facts above are inspect's output, the load's info lines are not (warnings stay).
        const spdlog::level::level_enum level = log().level();
        if (level < spdlog::level::warn) log().set_level(spdlog::level::warn);
        model::LoadOptions quiet;
        quiet.progress = false;
        try {
          model::CausalLM::load(ck, opts, quiet);
          log().set_level(level);
        } catch (const Error& e) {
          log().set_level(level);
          fail("{} (the checkpoint is described above, but fp4lm cannot load it)", e.what());
        }
        return 0;
      };
    });

}  // namespace
}  // namespace fp4lm::cli
