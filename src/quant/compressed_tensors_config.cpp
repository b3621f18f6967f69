// GCC 12 at -O1 with the sanitizers (CI's ASan build) reports a false maybe-uninitialized inside
// <regex>'s own std::function code, which -Werror would turn into a failed build.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include "quant/compressed_tensors_config.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "core/error.h"

namespace fp4lm::quant {

using nlohmann::json;

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A layer class name: no dot, starts upper-case ("Linear", "Embedding").
bool is_class_name(const std::string& t) {
  return !t.empty() && t.find('.') == std::string::npos && std::isupper(static_cast<unsigned char>(t[0]));
}

CtTarget parse_target(const json& t, const std::string& where, bool allow_class) {
  if (!t.is_string()) fail("{}: expected a string, found {}", where, t.dump());
  CtTarget out;
  out.text = t.get<std::string>();
  if (out.text.compare(0, 3, "re:") == 0) {
    try {
      out.regex.emplace(out.text.substr(3), std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail("{}: '{}' is not a regular expression fp4lm can read ({})", where, out.text, e.what());
    }
  } else {
    out.class_name = allow_class && is_class_name(out.text);
  }
  return out;
}

std::vector<CtTarget> parse_targets(const json& v, const std::string& where, bool allow_class) {
  std::vector<CtTarget> out;
  if (v.is_null()) return out;
  if (!v.is_array()) fail("{}: must be a list of strings, found {}", where, v.dump());
  for (size_t i = 0; i < v.size(); ++i) out.push_back(parse_target(v[i], fmt::format("{}[{}]", where, i), allow_class));
  return out;
}

// Python's re.match: the pattern must match at the start of the name (not necessarily to its end).
bool name_matches(const CtTarget& t, const std::string& name) {
  if (t.regex) return std::regex_search(name, *t.regex, std::regex_constants::match_continuous);
  return !t.class_name && t.text == name;
}

// vLLM matches a class target as a case-insensitive substring of the module's class name; every
// module fp4lm asks about is a Linear.
bool class_matches(const CtTarget& t) { return t.class_name && lower("Linear").find(lower(t.text)) != std::string::npos; }

int int_member(const json& o, const char* key) {
  return o.contains(key) && o[key].is_number_integer() ? o[key].get<int>() : -1;
}
std::string str_member(const json& o, const char* key) {
  return o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : "";
}
bool is_dynamic(const json& o) {
  // "dynamic": true / false / "local" (NVFP4 activations: local scales at run time, global static).
  return o.contains("dynamic") && o["dynamic"].is_boolean() && o["dynamic"].get<bool>();
}

std::string args_str(const json& a) {
  if (!a.is_object()) return "none";
  return fmt::format("{}-bit {} (strategy {}{})", int_member(a, "num_bits"), str_member(a, "type"),
                     str_member(a, "strategy").empty() ? "?" : str_member(a, "strategy"),
                     int_member(a, "group_size") > 0 ? fmt::format(", group_size {}", int_member(a, "group_size"))
                                                     : std::string());
}

// The scheme of one group's weights and activations; sets g.unsupported when there is none.
void classify(CtGroup& g, const json& body, const std::string& format) {
  const json w = body.contains("weights") ? body["weights"] : json();
  const json a = body.contains("input_activations") ? body["input_activations"] : json();
  const bool has_act = a.is_object();
  const std::string what = fmt::format("weights {}, input activations {}, format '{}'", args_str(w),
                                       args_str(a), format.empty() ? "?" : format);
  auto unsupported = [&](const std::string& why) {
    g.unsupported = fmt::format("{} ({}): {}; fp4lm reads NVFP4 (4-bit float weights in blocks of 16, "
                                "nvfp4-pack-quantized) and FP8 (8-bit float weights per tensor, per channel or "
                                "in blocks, float-quantized) and INT4 W4A16 (4-bit int weights, pack-quantized)",
                                what, why, "not supported");
  };
  if (!w.is_object()) return unsupported("no weights args");
  const int bits = int_member(w, "num_bits");
  const std::string type = str_member(w, "type"), strategy = str_member(w, "strategy");
  if (type == "int") {
    if (format != "pack-quantized") return unsupported("integer weights need format pack-quantized");
    if (bits != 4) return unsupported(fmt::format("{}-bit integer weights (fp4lm reads 4-bit ones)", bits));
    if (has_act) return unsupported("integer weights with quantized activations (only W4A16 is read)");
    if (w.contains("dynamic") && w["dynamic"] != false) return unsupported("dynamic integer weights");
    if (strategy != "group" && strategy != "channel")
      return unsupported("4-bit integer weights with strategy '" + strategy + "' (expected group or channel)");
    Int4Layout l;
    if (strategy == "group") {
      l.group = int_member(w, "group_size");
      if (l.group <= 0) return unsupported("strategy group without a positive group_size");
    }
    if (w.contains("symmetric") && !w["symmetric"].is_boolean()) return unsupported("a non-boolean 'symmetric'");
    l.symmetric = !w.contains("symmetric") || w["symmetric"].get<bool>();
    const std::string actorder = w.contains("actorder") && w["actorder"].is_string() ? lower(str_member(w, "actorder")) : "";
    if (w.contains("actorder") && !w["actorder"].is_null() && !w["actorder"].is_string())
      return unsupported("a non-string 'actorder'");
    if (actorder == "group" || actorder == "dynamic")
      l.act_order = true;
    else if (!actorder.empty() && actorder != "weight" && actorder != "static")
      return unsupported("actorder '" + actorder + "' (expected group, weight or null)");
    g.scheme = Scheme::int4;
    g.int4 = l;
    g.description = fmt::format("INT4 W4A16, {}, {}{} ({})",
                                l.group ? fmt::format("group_size {}", l.group) : std::string("per channel"),
                                l.symmetric ? "symmetric" : "asymmetric", l.act_order ? ", actorder group" : "", format);
    return;
  }
  if (type != "float") return unsupported("weights of type '" + type + "'");
  if (bits == 4) {
    if (strategy != "tensor_group" || int_member(w, "group_size") != 16)
      return unsupported("4-bit float weights other than NVFP4's tensor_group of 16 (MXFP4?)");
    if (format != "nvfp4-pack-quantized") return unsupported("NVFP4 weights need format nvfp4-pack-quantized");
    if (!has_act) {
      g.scheme = Scheme::nvfp4_a16;
      g.description = "NVFP4 W4A16 (nvfp4-pack-quantized)";
      return;
    }
    if (int_member(a, "num_bits") != 4 || str_member(a, "type") != "float" || int_member(a, "group_size") != 16)
      return unsupported("NVFP4 weights with activations other than NVFP4");
    g.scheme = Scheme::nvfp4;
    g.description = "NVFP4 W4A4 (nvfp4-pack-quantized)";
    return;
  }
  if (bits != 8) return unsupported(fmt::format("{}-bit float weights", bits));
  if (strategy != "tensor" && strategy != "channel" && strategy != "block")
    return unsupported("FP8 weights with strategy '" + strategy + "'");
  if (format != "float-quantized" && format != "naive-quantized")
    return unsupported("FP8 weights need format float-quantized");
  if (strategy == "block") {
    // FP8_BLOCK: weight_scale [ceil(N/bn), ceil(K/bk)]; activations dynamic per token per group.
    const json bs = w.contains("block_structure") ? w["block_structure"] : json();
    if (!bs.is_array() || bs.size() != 2 || !bs[0].is_number_integer() || !bs[1].is_number_integer() ||
        bs[0].get<int64_t>() <= 0 || bs[1].get<int64_t>() <= 0)
      return unsupported("block-wise FP8 weights need block_structure [rows, columns], found " + bs.dump());
    g.block_n = bs[0].get<int64_t>();
    g.block_k = bs[1].get<int64_t>();
    const std::string blocks = fmt::format("{}x{} block weight scales", g.block_n, g.block_k);
    if (!has_act) {
      g.scheme = Scheme::fp8_block_a16;
      g.description = fmt::format("FP8 W8A16, {} ({})", blocks, format);
      return;
    }
    if (int_member(a, "num_bits") != 8 || str_member(a, "type") != "float" || !is_dynamic(a) ||
        str_member(a, "strategy") != "group" || int_member(a, "group_size") != g.block_k)
      return unsupported(fmt::format("block-wise FP8 weights need no activation args or dynamic 8-bit float "
                                     "activations per group of {} (the block's columns)",
                                     g.block_k));
    g.scheme = Scheme::fp8_block;
    g.description = fmt::format("FP8 W8A8, {}, dynamic per-token-group activations ({})", blocks, format);
    return;
  }
  const std::string per = strategy == "tensor" ? "per-tensor" : "per-channel";
  if (!has_act) {
    g.scheme = Scheme::fp8_a16;
    g.description = fmt::format("FP8 W8A16, {} weight scales ({})", per, format);
    return;
  }
  if (int_member(a, "num_bits") != 8 || str_member(a, "type") != "float")
    return unsupported("FP8 weights with activations other than FP8");
  const std::string astrat = str_member(a, "strategy");
  if (is_dynamic(a)) {
    if (astrat != "token" && astrat != "tensor") return unsupported("dynamic FP8 activations per " + astrat);
    g.scheme = Scheme::fp8_dynamic;
    g.description = fmt::format("FP8 W8A8, {} weight scales, dynamic per-{} activations ({})", per, astrat, format);
    return;
  }
  if (astrat != "tensor") return unsupported("static FP8 activations per " + astrat);
  g.scheme = Scheme::fp8;
  g.description = fmt::format("FP8 W8A8, {} weight scales, static activations ({})", per, format);
}

std::optional<std::string> parse_kv(const json& kv, const std::string& where) {
  if (kv.is_null()) return std::nullopt;
  if (kv.is_object() && int_member(kv, "num_bits") == 8 && str_member(kv, "type") == "float") return "FP8";
  if (kv.is_object() && int_member(kv, "num_bits") == 8 && str_member(kv, "type") == "int") return "INT8";
  fail("{}: kv_cache_scheme must be null or 8-bit float / int args (e.g. {{\"num_bits\": 8, \"type\": \"float\"}}), "
       "found {}",
       where, kv.dump());
}

bool non_empty(const json& qc, const char* key) {
  return qc.contains(key) && !qc[key].is_null() && !(qc[key].is_object() && qc[key].empty());
}

}  // namespace

CompressedTensorsConfig parse_compressed_tensors_config(const json& qc, const std::string& where) {
  if (!qc.is_object()) fail("{}: expected an object, found {}", where, qc.type_name());
  CompressedTensorsConfig c;
  c.source_path = where;
  c.format = str_member(qc, "format");
  if (const std::string st = str_member(qc, "quantization_status"); !st.empty() && st != "compressed")
    fail("{}: quantization_status '{}': fp4lm reads compressed checkpoints (quantization_status \"compressed\")",
         where, st);
  if (non_empty(qc, "sparsity_config"))
    fail("{}: sparsity_config {}: sparse compressed-tensors checkpoints are not supported", where,
         qc["sparsity_config"].dump());
  if (non_empty(qc, "transform_config"))
    fail("{}: transform_config is set: checkpoints with weight transforms (rotations) are not supported", where);
  if (!qc.contains("config_groups") || !qc["config_groups"].is_object() || qc["config_groups"].empty())
    fail("{}: config_groups must be a non-empty object of group -> {{targets, weights, input_activations}}", where);
  for (const auto& [name, body] : qc["config_groups"].items()) {
    const std::string gw = fmt::format("{}: config_groups['{}']", where, name);
    if (!body.is_object()) fail("{}: expected an object, found {}", gw, body.dump());
    CtGroup g;
    g.name = name;
    if (!body.contains("targets") || !body["targets"].is_array() || body["targets"].empty())
      fail("{}: needs a non-empty 'targets' list", gw);
    g.targets = parse_targets(body["targets"], gw + ".targets", true);
    // mixed-precision: each group names its own format; otherwise the top-level one applies.
    std::string format = str_member(body, "format");
    if (format.empty() || format == "mixed-precision") format = c.format;
    if (format == "mixed-precision")
      fail("{}: the config's format is mixed-precision, so each group needs its own 'format'", gw);
    classify(g, body, format);
    g.unsupported = g.unsupported.empty() ? "" : gw + ": " + g.unsupported;
    c.groups.push_back(std::move(g));
  }
  if (qc.contains("ignore")) c.ignore = parse_targets(qc["ignore"], where + ": ignore", false);
  if (qc.contains("kv_cache_scheme")) c.kv_cache = parse_kv(qc["kv_cache_scheme"], where + ": kv_cache_scheme");
  return c;
}

std::string CompressedTensorsConfig::describe() const {
  std::string groups_str;
  for (const CtGroup& g : groups)
    groups_str += fmt::format("{}{}: {}", groups_str.empty() ? "" : "; ", g.name,
                              g.scheme ? g.description : std::string("unsupported"));
  return fmt::format("compressed-tensors {} checkpoint ({})", format.empty() ? "?" : format, groups_str);
}

bool CompressedTensorsConfig::declares(Scheme s) const {
  return std::any_of(groups.begin(), groups.end(), [&](const CtGroup& g) { return g.scheme == s; });
}

std::string CompressedTensorsConfig::file_name(const std::string& module) const {
  for (const auto& [from, to] : prefixes)
    if (module.compare(0, to.size(), to) == 0) return from + module.substr(to.size());
  return module;
}

const CtGroup* CompressedTensorsConfig::group_of(const std::string& module) const {
  const std::string name = file_name(module);
  for (const CtGroup& g : groups)
    for (const CtTarget& t : g.targets)
      if (name_matches(t, name)) return &g;
  for (const CtGroup& g : groups)
    for (const CtTarget& t : g.targets)
      if (class_matches(t)) return &g;
  return nullptr;
}

bool CompressedTensorsConfig::excluded(const std::string& module) const {
  const std::string name = file_name(module);
  return std::any_of(ignore.begin(), ignore.end(), [&](const CtTarget& t) { return name_matches(t, name); });
}

Scheme CompressedTensorsConfig::module_scheme(const std::string& module, const ModuleTensors&) const {
  if (excluded(module)) return Scheme::unquantized;
  const CtGroup* g = group_of(module);
  if (!g) return Scheme::unquantized;
  if (!g->scheme) fail("{} (module {})", g->unsupported, file_name(module));
  return *g->scheme;
}

std::pair<int64_t, int64_t> CompressedTensorsConfig::weight_block(const std::string& module) const {
  const CtGroup* g = excluded(module) ? nullptr : group_of(module);
  return g ? std::pair<int64_t, int64_t>{g->block_n, g->block_k} : std::pair<int64_t, int64_t>{0, 0};
}

Int4Layout CompressedTensorsConfig::int4_layout(const std::string& module) const {
  const CtGroup* g = excluded(module) ? nullptr : group_of(module);
  return g ? g->int4 : Int4Layout{};
}

std::shared_ptr<const QuantConfig> CompressedTensorsConfig::with_prefix(const std::string& from,
                                                                        const std::string& to) const {
  auto out = std::make_shared<CompressedTensorsConfig>(*this);
  out->prefixes.emplace_back(from, to);
  return out;
}

}  // namespace fp4lm::quant
