#include "quant/modelopt_config.h"

#include <algorithm>
#include <cctype>
#include <set>

#include "core/error.h"

namespace fp4lm::quant {

using nlohmann::json;

namespace {

constexpr const char* kSupported = "NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION";

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::optional<int> parse_group_size(const json& v, const std::string& where) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_number_integer()) fail("{}: group_size must be an integer or null, found {}", where, v.dump());
  return v.get<int>();
}

std::vector<std::string> parse_string_list(const json& v, const std::string& where, const char* key) {
  std::vector<std::string> out;
  if (v.is_null()) return out;
  if (!v.is_array()) fail("{}: {} must be a list of strings or null, found {}", where, key, v.dump());
  for (const json& s : v) {
    if (!s.is_string()) fail("{}: {} must hold strings, found {}", where, key, s.dump());
    out.push_back(s.get<std::string>());
  }
  return out;
}

std::map<std::string, LayerQuant> parse_quantized_layers(const json& v, const std::string& where) {
  std::map<std::string, LayerQuant> out;
  if (!v.is_object()) fail("{}: quantized_layers must be an object of module -> {{quant_algo, group_size}}", where);
  for (const auto& [module, entry] : v.items()) {
    std::string w = where + ": quantized_layers['" + module + "']";
    if (!entry.is_object() || !entry.contains("quant_algo") || !entry["quant_algo"].is_string())
      fail("{}: expected an object with a string quant_algo, found {}", w, entry.dump());
    LayerQuant lq;
    lq.algo = parse_algo(entry["quant_algo"].get<std::string>(), w);
    if (lq.algo == QuantAlgo::MIXED_PRECISION) fail("{}: MIXED_PRECISION cannot be nested", w);
    if (entry.contains("group_size")) lq.group_size = parse_group_size(entry["group_size"], w);
    out[module] = lq;
  }
  return out;
}

// NVFP4 formats fix the block at 16 elements; other sizes are not NVFP4.
void check_group_size(QuantAlgo algo, std::optional<int> gs, const std::string& where) {
  if ((algo == QuantAlgo::NVFP4 || algo == QuantAlgo::W4A16_NVFP4) && gs && *gs != 16)
    fail("{}: group_size must be 16 for {} (found {})", where, algo_name(algo), *gs);
}

// ModelOpt's KV-cache algorithms. fp4lm keeps its KV cache in the activation dtype whatever the
// checkpoint says, but a name outside this list is a typo or a format nobody can honour.
void check_kv_cache_algo(const std::optional<std::string>& kv, const std::string& where) {
  if (!kv) return;
  for (const char* known : {"FP8", "NVFP4", "NVFP4_AFFINE", "INT8"})
    if (upper(*kv) == known) return;
  fail("{}: unsupported kv_cache_quant_algo '{}' (known: FP8, NVFP4, NVFP4_AFFINE, INT8, or null)", where, *kv);
}

void validate(QuantConfig& q, const std::string& where) {
  check_group_size(q.algo, q.group_size, where);
  check_kv_cache_algo(q.kv_cache_quant_algo, where);
  if (q.algo == QuantAlgo::MIXED_PRECISION) {
    if (q.quantized_layers.empty())
      fail("{}: MIXED_PRECISION needs a non-empty 'quantized_layers' map", where);
    for (const auto& [m, lq] : q.quantized_layers)
      check_group_size(lq.algo, lq.group_size ? lq.group_size : q.group_size, where + ": quantized_layers['" + m + "']");
  }
  if ((q.algo == QuantAlgo::NVFP4 || q.algo == QuantAlgo::W4A16_NVFP4) && !q.group_size) q.group_size = 16;
}

QuantConfig from_hf_quant_config(const json& j, const std::string& path) {
  if (!j.is_object()) fail("{}: expected a JSON object, found {}", path, j.type_name());
  if (!j.contains("quantization") || !j["quantization"].is_object())
    fail("{}: missing the 'quantization' object", path);
  const json& q = j["quantization"];
  for (const char* key : {"quant_algo", "kv_cache_quant_algo", "group_size", "exclude_modules"})
    if (!q.contains(key)) fail("{}: 'quantization' is missing the required key '{}' (it may be null)", path, key);
  QuantConfig c;
  c.source = path;
  c.producer = j.value("producer", json());
  if (!q["quant_algo"].is_null()) {
    if (!q["quant_algo"].is_string()) fail("{}: quant_algo must be a string or null", path);
    c.algo = parse_algo(q["quant_algo"].get<std::string>(), path);
  }
  if (!q["kv_cache_quant_algo"].is_null()) {
    if (!q["kv_cache_quant_algo"].is_string()) fail("{}: kv_cache_quant_algo must be a string or null", path);
    c.kv_cache_quant_algo = q["kv_cache_quant_algo"].get<std::string>();
  }
  c.group_size = parse_group_size(q["group_size"], path);
  c.exclude_modules = parse_string_list(q["exclude_modules"], path, "exclude_modules");
  if (q.contains("quantized_layers") && !q["quantized_layers"].is_null())
    c.quantized_layers = parse_quantized_layers(q["quantized_layers"], path);
  validate(c, path);
  return c;
}

// The algorithm a config_groups entry describes: 4-bit float weights in blocks of 16 are NVFP4,
// W4A4 when activations are 4-bit too, W4A16 when they are absent.
std::optional<QuantAlgo> algo_from_config_groups(const json& groups, std::optional<int>* group_size) {
  if (!groups.is_object() || groups.empty()) return std::nullopt;
  const json& g = groups.begin().value();
  if (!g.is_object() || !g.contains("weights") || !g["weights"].is_object()) return std::nullopt;
  const json& w = g["weights"];
  if (w.contains("group_size") && w["group_size"].is_number_integer()) *group_size = w["group_size"].get<int>();
  int bits = w.value("num_bits", 0);
  std::string type = w.value("type", std::string());
  bool has_act = g.contains("input_activations") && g["input_activations"].is_object();
  if (bits == 4 && type == "float") return has_act ? QuantAlgo::NVFP4 : QuantAlgo::W4A16_NVFP4;
  if (bits == 8 && type == "float") return QuantAlgo::FP8;
  return std::nullopt;
}

QuantConfig from_config_json(const json& qc, const std::string& where) {
  if (!qc.is_object()) fail("{}: expected an object, found {}", where, qc.type_name());
  std::string method = qc.value("quant_method", std::string());
  if (upper(method) != "MODELOPT")
    fail("{}: unsupported quant_method '{}' (fp4lm loads quant_method \"modelopt\")", where, method);
  QuantConfig c;
  c.source = where;
  c.producer = qc.value("producer", json());
  std::optional<int> groups_gs;
  std::optional<QuantAlgo> inferred;
  if (qc.contains("config_groups")) inferred = algo_from_config_groups(qc["config_groups"], &groups_gs);
  if (qc.contains("quant_algo") && !qc["quant_algo"].is_null()) {
    if (!qc["quant_algo"].is_string()) fail("{}: quant_algo must be a string", where);
    c.algo = parse_algo(qc["quant_algo"].get<std::string>(), where);
  } else if (inferred) {
    c.algo = *inferred;
  } else {
    fail("{}: no quant_algo and no config_groups that name a supported format ({})", where, kSupported);
  }
  c.group_size = qc.contains("group_size") ? parse_group_size(qc["group_size"], where) : groups_gs;
  if (qc.contains("ignore")) c.exclude_modules = parse_string_list(qc["ignore"], where, "ignore");
  if (qc.contains("exclude_modules")) {
    auto more = parse_string_list(qc["exclude_modules"], where, "exclude_modules");
    c.exclude_modules.insert(c.exclude_modules.end(), more.begin(), more.end());
  }
  if (qc.contains("kv_cache_quant_algo") && qc["kv_cache_quant_algo"].is_string())
    c.kv_cache_quant_algo = qc["kv_cache_quant_algo"].get<std::string>();
  if (qc.contains("kv_cache_scheme") && !qc["kv_cache_scheme"].is_null()) {
    const json& kv = qc["kv_cache_scheme"];
    if (kv.is_string()) c.kv_cache_quant_algo = kv.get<std::string>();
    else if (kv.is_object() && kv.value("num_bits", 0) == 8 && kv.value("type", std::string()) == "float")
      c.kv_cache_quant_algo = "FP8";
    else c.kv_cache_quant_algo = kv.dump();
  }
  if (qc.contains("quantized_layers") && !qc["quantized_layers"].is_null())
    c.quantized_layers = parse_quantized_layers(qc["quantized_layers"], where);
  validate(c, where);
  return c;
}

bool glob_match(const char* p, const char* s) {
  // Iterative wildcard match with backtracking to the last '*'.
  const char *star = nullptr, *resume = nullptr;
  while (*s) {
    if (*p == '?' || (*p && *p != '*' && *p == *s)) {
      ++p, ++s;
    } else if (*p == '*') {
      star = p++;
      resume = s;
    } else if (star) {
      p = star + 1;
      s = ++resume;
    } else {
      return false;
    }
  }
  while (*p == '*') ++p;
  return *p == 0;
}

}  // namespace

std::string_view algo_name(QuantAlgo a) {
  switch (a) {
    case QuantAlgo::None: return "UNQUANTIZED";
    case QuantAlgo::NVFP4: return "NVFP4";
    case QuantAlgo::W4A16_NVFP4: return "W4A16_NVFP4";
    case QuantAlgo::FP8: return "FP8";
    case QuantAlgo::MIXED_PRECISION: return "MIXED_PRECISION";
  }
  return "?";
}

QuantAlgo parse_algo(const std::string& name, const std::string& where) {
  std::string u = upper(name);
  if (u == "NVFP4") return QuantAlgo::NVFP4;
  if (u == "W4A16_NVFP4") return QuantAlgo::W4A16_NVFP4;
  if (u == "FP8") return QuantAlgo::FP8;
  if (u == "MIXED_PRECISION") return QuantAlgo::MIXED_PRECISION;
  fail("{}: unknown quant_algo '{}' (supported: {})", where, name, kSupported);
}

QuantConfig parse_quant_config(const std::optional<json>& hf_quant_config, const json& config_json,
                               const std::string& dir) {
  std::optional<QuantConfig> a, b;
  if (hf_quant_config) a = from_hf_quant_config(*hf_quant_config, dir + "/hf_quant_config.json");
  if (config_json.is_object() && config_json.contains("quantization_config") &&
      !config_json["quantization_config"].is_null())
    b = from_config_json(config_json["quantization_config"], dir + "/config.json: quantization_config");
  if (a && b) {
    auto as_set = [](const std::vector<std::string>& v) { return std::set<std::string>(v.begin(), v.end()); };
    if (a->algo != b->algo)
      fail("{}: hf_quant_config.json says quant_algo {} but config.json's quantization_config says {}", dir,
           algo_name(a->algo), algo_name(b->algo));
    if (a->group_size != b->group_size)
      fail("{}: hf_quant_config.json and config.json disagree on group_size ({} vs {})", dir,
           a->group_size.value_or(0), b->group_size.value_or(0));
    if (as_set(a->exclude_modules) != as_set(b->exclude_modules))
      fail("{}: hf_quant_config.json exclude_modules and config.json quantization_config.ignore differ", dir);
    return *a;
  }
  if (a) return *a;
  if (b) return *b;
  return QuantConfig{};
}

bool pattern_excludes(const std::string& pattern, const std::string& module) {
  if (pattern == module) return true;
  if (module.size() > pattern.size() && module.compare(0, pattern.size(), pattern) == 0 &&
      module[pattern.size()] == '.')
    return true;
  if (pattern.find_first_of("*?") == std::string::npos) return false;
  // A glob excludes what it matches and everything below it (same dot-boundary rule).
  if (glob_match(pattern.c_str(), module.c_str())) return true;
  for (size_t dot = module.find('.'); dot != std::string::npos; dot = module.find('.', dot + 1))
    if (glob_match(pattern.c_str(), module.substr(0, dot).c_str())) return true;
  return false;
}

bool is_excluded(const std::vector<std::string>& patterns, const std::string& module) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return pattern_excludes(p, module); });
}

QuantAlgo module_algo(const QuantConfig& q, const std::string& module) {
  if (q.algo == QuantAlgo::None || is_excluded(q.exclude_modules, module)) return QuantAlgo::None;
  if (q.algo != QuantAlgo::MIXED_PRECISION) return q.algo;
  if (auto it = q.quantized_layers.find(module); it != q.quantized_layers.end()) return it->second.algo;
  // The closest enclosing container entry (e.g. "model.layers.0.mlp.experts").
  size_t best = 0;
  QuantAlgo algo = QuantAlgo::None;
  for (const auto& [key, lq] : q.quantized_layers) {
    if (key.size() > best && module.size() > key.size() && module.compare(0, key.size(), key) == 0 &&
        module[key.size()] == '.') {
      best = key.size();
      algo = lq.algo;
    }
  }
  return algo;
}

}  // namespace fp4lm::quant
