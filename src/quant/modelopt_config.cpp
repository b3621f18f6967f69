#include "quant/modelopt_config.h"

#include <algorithm>
#include <cctype>
#include <set>

#include <fmt/format.h>

#include "core/error.h"
#include "core/log.h"

namespace fp4lm::quant {

using nlohmann::json;

namespace {

constexpr const char* kSupported = "NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION, NVFP4_AWQ, W4A16_AWQ, W4A8_NVFP4_FP8, FP8_PER_CHANNEL_PER_TOKEN, FP8_PB_WO, MXFP8, W8A16, W8A8_SQ_PER_CHANNEL, W4A8_MXFP4_FP8, NVFP4_SVD";

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

// Every key of a quantization object has an effect or is refused by name (docs/FORMAT.md).
void check_keys(const json& obj, std::initializer_list<const char*> known, const std::string& where) {
  for (const auto& [key, value] : obj.items()) {
    bool ok = false;
    std::string names;
    for (const char* k : known) {
      ok |= key == k;
      names += (names.empty() ? "" : ", ") + std::string(k);
    }
    if (!ok)
      fail("{}: unknown quantization key '{}' (value {}); fp4lm reads {}, and a key it does not know may change what "
           "the tensors mean, so it is not ignored",
           where, key, value.dump(), names);
  }
}

// has_zero_point: ModelOpt's AWQ / NVFP4 exports write false; true (asymmetric weights with zero
// points) is no format fp4lm runs.
void check_zero_point(const json& obj, const std::string& where) {
  if (!obj.contains("has_zero_point") || obj["has_zero_point"].is_null()) return;
  if (!obj["has_zero_point"].is_boolean()) fail("{}: has_zero_point must be a boolean, found {}", where, obj["has_zero_point"].dump());
  if (obj["has_zero_point"].get<bool>())
    fail("{}: has_zero_point true (asymmetric weights with zero points) is not supported; fp4lm runs symmetric "
         "NVFP4 / FP8 weights",
         where);
}

bool parse_pre_quant_scale(const json& obj, const std::string& where) {
  if (!obj.contains("pre_quant_scale") || obj["pre_quant_scale"].is_null()) return false;
  if (!obj["pre_quant_scale"].is_boolean())
    fail("{}: pre_quant_scale must be a boolean, found {}", where, obj["pre_quant_scale"].dump());
  return obj["pre_quant_scale"].get<bool>();
}

// NVFP4_SVD's low-rank size: a positive integer, only with NVFP4_SVD (elsewhere it would name a branch
// no other algorithm has).
std::optional<int> parse_lora_rank(const json& obj, QuantAlgo algo, const std::string& where) {
  if (!obj.contains("lora_rank") || obj["lora_rank"].is_null()) return std::nullopt;
  const json& v = obj["lora_rank"];
  if (!v.is_number_integer() || v.get<int>() <= 0) fail("{}: lora_rank must be a positive integer, found {}", where, v.dump());
  if (algo != QuantAlgo::NVFP4_SVD && algo != QuantAlgo::MIXED_PRECISION)
    fail("{}: lora_rank {} is SVDQuant's (NVFP4_SVD), but quant_algo is {}", where, v.dump(), algo_name(algo));
  return v.get<int>();
}

std::map<std::string, LayerQuant> parse_quantized_layers(const json& v, const std::string& where) {
  std::map<std::string, LayerQuant> out;
  if (!v.is_object()) fail("{}: quantized_layers must be an object of module -> {{quant_algo, group_size}}", where);
  for (const auto& [module, entry] : v.items()) {
    std::string w = where + ": quantized_layers['" + module + "']";
    if (!entry.is_object() || !entry.contains("quant_algo") || !entry["quant_algo"].is_string())
      fail("{}: expected an object with a string quant_algo, found {}", w, entry.dump());
    check_keys(entry, {"quant_algo", "group_size", "has_zero_point", "pre_quant_scale"}, w);
    check_zero_point(entry, w);
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
  if ((algo == QuantAlgo::NVFP4 || algo == QuantAlgo::W4A16_NVFP4 || algo == QuantAlgo::NVFP4_AWQ ||
       algo == QuantAlgo::NVFP4_SVD) &&
      gs && *gs != 16)
    fail("{}: group_size must be 16 for {} (found {})", where, algo_name(algo), *gs);
  // ModelOpt's W4A8_NVFP4_FP8 recipe quantizes the weights in E2M1 blocks of 32 (numerics
  // nvfp4_bs32) and writes group_size 32; 16 is NVFP4's own block.
  if (algo == QuantAlgo::W4A8_NVFP4_FP8 && gs && *gs != 16 && *gs != 32)
    fail("{}: group_size must be 16 or 32 for W4A8_NVFP4_FP8 (found {})", where, *gs);
  // MXFP8's block is 32 (the export writes group_size 32); FP8_PB_WO's export writes none (its
  // 128 x 128 block is not a group size): any other value would say another layout.
  // W4A8_MXFP4_FP8: MXFP4's E8M0 block is 32 (the recipe's block_sizes -1: 32; the export writes it).
  if (algo == QuantAlgo::W4A8_MXFP4_FP8 && gs && *gs != 32)
    fail("{}: group_size must be 32 for W4A8_MXFP4_FP8 (its E8M0 scale block; found {})", where, *gs);
  if (algo == QuantAlgo::MXFP8 && gs && *gs != 32)
    fail("{}: group_size must be 32 for MXFP8 (its E8M0 scale block; found {})", where, *gs);
  if (algo == QuantAlgo::FP8_PB_WO && gs && *gs != kFp8PbWoBlock)
    fail("{}: FP8_PB_WO's export writes no group_size (its blocks are 128 x 128); found {}", where, *gs);
  // The int8 exports scale per output channel and write no group_size: a group says another layout.
  if ((algo == QuantAlgo::W8A16 || algo == QuantAlgo::W8A8_SQ_PER_CHANNEL) && gs)
    fail("{}: {} scales int8 weights per output channel and has no group_size (found {})", where, algo_name(algo), *gs);
  if (algo == QuantAlgo::W4A16_AWQ && (!gs || *gs <= 0))
    fail("{}: W4A16_AWQ needs a positive group_size (the int4 scale block; found {})", where,
         gs ? std::to_string(*gs) : std::string("none"));
}

bool is_nvfp4(QuantAlgo a) {
  return a == QuantAlgo::NVFP4 || a == QuantAlgo::W4A16_NVFP4 || a == QuantAlgo::NVFP4_AWQ || a == QuantAlgo::NVFP4_SVD;
}

// ModelOpt's KV-cache algorithms. fp4lm keeps its KV cache in the activation dtype whatever the
// checkpoint says, but a name outside this list is a typo or a format nobody can honour.
void check_kv_cache_algo(const std::optional<std::string>& kv, const std::string& where) {
  if (!kv) return;
  for (const char* known : {"FP8", "NVFP4", "NVFP4_AFFINE", "INT8"})
    if (upper(*kv) == known) return;
  fail("{}: unsupported kv_cache_quant_algo '{}' (known: FP8, NVFP4, NVFP4_AFFINE, INT8, or null)", where, *kv);
}

void validate(ModeloptConfig& q, const std::string& where) {
  check_group_size(q.algo, q.group_size, where);
  check_kv_cache_algo(q.kv_cache_quant_algo, where);
  if (q.algo == QuantAlgo::MIXED_PRECISION) {
    if (q.quantized_layers.empty())
      fail("{}: MIXED_PRECISION needs a non-empty 'quantized_layers' map (or config_groups with targets)", where);
    for (auto& [m, lq] : q.quantized_layers) {
      if (!lq.group_size) lq.group_size = q.group_size;
      check_group_size(lq.algo, lq.group_size, where + ": quantized_layers['" + m + "']");
      if (is_nvfp4(lq.algo) && !lq.group_size) lq.group_size = 16;
    }
  }
  // FP8, MIXED_PRECISION and minimal exports write no group_size; NVFP4's block is always 16.
  if (is_nvfp4(q.algo) && !q.group_size) {
    log().debug("{}: no group_size for {}; using 16, the NVFP4 block size", where, algo_name(q.algo));
    q.group_size = 16;
  }
}

// A string member, or "" when absent or null; any other type is an error naming the key.
std::string string_member(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return "";
  if (!obj[key].is_string()) fail("{}: {} must be a string, found {}", where, key, obj[key].dump());
  return obj[key].get<std::string>();
}

json object_member(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return json();
  if (!obj[key].is_object()) fail("{}: {} must be an object, found {}", where, key, obj[key].dump());
  return obj[key];
}

bool produced_by_modelopt(const json& producer) {
  return producer.is_object() && producer.contains("name") && producer["name"].is_string() &&
         upper(producer["name"].get<std::string>()) == "MODELOPT";
}

ModeloptConfig from_hf_quant_config(const json& j, const std::string& path) {
  if (!j.is_object()) fail("{}: expected a JSON object, found {}", path, j.type_name());
  if (!j.contains("quantization") || !j["quantization"].is_object())
    fail("{}: missing the 'quantization' object", path);
  const json& q = j["quantization"];
  check_keys(q, {"quant_algo", "kv_cache_quant_algo", "group_size", "exclude_modules", "quantized_layers",
                 "has_zero_point", "pre_quant_scale", "lora_rank"},
             path + ": quantization");
  check_zero_point(q, path);
  // group_size, exclude_modules and kv_cache_quant_algo are optional: FP8 and MIXED_PRECISION
  // exports omit group_size, Nemotron-style files carry only quant_algo and kv_cache_quant_algo.
  if (!q.contains("quant_algo"))
    fail("{}: 'quantization' is missing the required key 'quant_algo' (it may be null)", path);
  ModeloptConfig c;
  c.source_path = path;
  c.producer = j.contains("producer") ? j["producer"] : json();
  if (!q["quant_algo"].is_null()) {
    if (!q["quant_algo"].is_string()) fail("{}: quant_algo must be a string or null", path);
    c.algo = parse_algo(q["quant_algo"].get<std::string>(), path);
  }
  if (std::string kv = string_member(q, "kv_cache_quant_algo", path); !kv.empty()) c.kv_cache_quant_algo = kv;
  if (q.contains("group_size")) c.group_size = parse_group_size(q["group_size"], path);
  if (q.contains("exclude_modules")) c.exclude_modules = parse_string_list(q["exclude_modules"], path, "exclude_modules");
  c.exclusions_listed = q.contains("exclude_modules");
  if (q.contains("quantized_layers") && !q["quantized_layers"].is_null())
    c.quantized_layers = parse_quantized_layers(q["quantized_layers"], path);
  c.pre_quant_scale = parse_pre_quant_scale(q, path);
  c.lora_rank = parse_lora_rank(q, c.algo, path);
  if (q.contains("quantized_layers") && q["quantized_layers"].is_object())
    for (const auto& [m, entry] : q["quantized_layers"].items()) c.pre_quant_scale |= parse_pre_quant_scale(entry, path);
  validate(c, path);
  return c;
}

// The algorithm one config_groups entry describes: 4-bit float weights in blocks of 16 are
// NVFP4, W4A4 when activations are 4-bit too, W4A16 when they are absent; 8-bit float weights
// are FP8. nullopt for anything else.
std::optional<QuantAlgo> group_algo(const json& g, std::optional<int>* group_size) {
  if (!g.is_object() || !g.contains("weights") || !g["weights"].is_object()) return std::nullopt;
  const json& w = g["weights"];
  if (w.contains("group_size") && w["group_size"].is_number_integer()) *group_size = w["group_size"].get<int>();
  const int bits = w.contains("num_bits") && w["num_bits"].is_number_integer() ? w["num_bits"].get<int>() : 0;
  const std::string type = w.contains("type") && w["type"].is_string() ? w["type"].get<std::string>() : "";
  const bool has_act = g.contains("input_activations") && g["input_activations"].is_object();
  // 4-bit float weights with 8-bit float activations is how convert_hf_config.py writes both
  // W4A8_NVFP4_FP8 and W4A8_MXFP4_FP8 (the same group, group_size 32 for either): only a
  // quant_algo / quantized_layers entry tells them apart, so such a group alone is no format.
  const json act = has_act ? g["input_activations"] : json();
  if (bits == 4 && type == "float" && has_act && act.contains("num_bits") && act["num_bits"] == 8)
    return std::nullopt;
  if (bits == 4 && type == "float") return has_act ? QuantAlgo::NVFP4 : QuantAlgo::W4A16_NVFP4;
  if (bits == 8 && type == "float") return QuantAlgo::FP8;
  return std::nullopt;
}

struct Groups {
  std::optional<QuantAlgo> algo;  // every group's algorithm when they agree
  std::optional<int> group_size;
  std::map<std::string, LayerQuant> targets;  // module targets (MIXED_PRECISION exports)
  std::string unsupported;                    // the first group of no supported format, for errors
};

// config_groups targets name modules ("lm_head", "model.layers.0.mlp.experts") or, in
// non-mixed configs, layer classes ("Linear").
bool is_class_name(const std::string& t) {
  return t.find('.') == std::string::npos && !t.empty() && std::isupper(static_cast<unsigned char>(t[0]));
}

Groups parse_config_groups(const json& groups, const std::string& where) {
  Groups out;
  if (!groups.is_object()) fail("{}: config_groups must be an object, found {}", where, groups.dump());
  bool first = true, agree = true;
  for (const auto& [name, g] : groups.items()) {
    std::optional<int> gs;
    std::optional<QuantAlgo> a = group_algo(g, &gs);
    if (!a) {
      if (out.unsupported.empty())
        out.unsupported = fmt::format("{}: config_groups['{}'] describes no supported format (weights of 4-bit "
                                      "float in blocks of 16, or 8-bit float), found {}",
                                      where, name, g.dump());
      continue;
    }
    if (first) out.algo = a, out.group_size = gs;
    agree &= *a == *out.algo;
    first = false;
    if (g.contains("targets") && g["targets"].is_array())
      for (const json& t : g["targets"])
        if (t.is_string() && !is_class_name(t.get<std::string>()))
          out.targets[t.get<std::string>()] = LayerQuant{*a, is_nvfp4(*a) ? gs : std::nullopt};
  }
  if (!agree) out.algo = QuantAlgo::MIXED_PRECISION;
  return out;
}

// kv_cache_scheme: a bare algorithm name ("FP8") or an object ({"num_bits": 8, "type": "float"}).
std::string parse_kv_cache_scheme(const json& kv, const std::string& where) {
  if (kv.is_string()) return kv.get<std::string>();
  if (kv.is_object() && kv.contains("num_bits") && kv["num_bits"] == 8 && kv.contains("type") && kv["type"] == "float")
    return "FP8";
  fail("{}: kv_cache_scheme must be a string such as \"FP8\" or an object {{\"num_bits\": 8, \"type\": \"float\"}}, "
       "found {}",
       where, kv.dump());
}

ModeloptConfig from_config_json(const json& qc, const std::string& where, bool modelopt_beside) {
  if (!qc.is_object()) fail("{}: expected an object, found {}", where, qc.type_name());
  check_keys(qc, {"quant_method", "quant_algo", "producer", "config_groups", "ignore", "exclude_modules",
                  "kv_cache_scheme", "kv_cache_quant_algo", "group_size", "quantized_layers", "has_zero_point",
                  "pre_quant_scale", "lora_rank"},
             where);
  check_zero_point(qc, where);
  const std::string method = string_member(qc, "quant_method", where);
  ModeloptConfig c;
  c.source_path = where;
  c.producer = qc.contains("producer") ? qc["producer"] : json();
  if (method.empty()) {
    // ModelOpt's own exporter sometimes writes no quant_method.
    if (!qc.contains("quant_algo") && !produced_by_modelopt(c.producer) && !modelopt_beside)
      fail("{}: no quant_method, and nothing says it is ModelOpt's (no quant_algo, no producer.name \"modelopt\", no "
           "hf_quant_config.json from modelopt beside it); fp4lm loads ModelOpt checkpoints",
           where);
  } else if (upper(method) != "MODELOPT") {
    fail("{}: quant_method '{}' is not ModelOpt's", where, method);
  }
  Groups groups;
  if (json g = object_member(qc, "config_groups", where); !g.is_null()) groups = parse_config_groups(g, where);
  if (std::string algo = string_member(qc, "quant_algo", where); !algo.empty()) {
    c.algo = parse_algo(algo, where);
  } else if (!groups.unsupported.empty()) {
    fail("{}", groups.unsupported);
  } else if (groups.algo) {
    c.algo = *groups.algo;
  } else {
    fail("{}: no quant_algo and no config_groups that name a supported format ({})", where, kSupported);
  }
  c.group_size = qc.contains("group_size") ? parse_group_size(qc["group_size"], where)
                 : c.algo == QuantAlgo::MIXED_PRECISION ? std::nullopt
                                                        : groups.group_size;
  c.exclusions_listed = qc.contains("ignore") || qc.contains("exclude_modules");
  if (qc.contains("ignore")) c.exclude_modules = parse_string_list(qc["ignore"], where, "ignore");
  if (qc.contains("exclude_modules")) {
    auto more = parse_string_list(qc["exclude_modules"], where, "exclude_modules");
    c.exclude_modules.insert(c.exclude_modules.end(), more.begin(), more.end());
  }
  if (std::string kv = string_member(qc, "kv_cache_quant_algo", where); !kv.empty()) c.kv_cache_quant_algo = kv;
  if (qc.contains("kv_cache_scheme") && !qc["kv_cache_scheme"].is_null())
    c.kv_cache_quant_algo = parse_kv_cache_scheme(qc["kv_cache_scheme"], where);
  if (qc.contains("quantized_layers") && !qc["quantized_layers"].is_null())
    c.quantized_layers = parse_quantized_layers(qc["quantized_layers"], where);
  else if (c.algo == QuantAlgo::MIXED_PRECISION) {
    if (!groups.unsupported.empty()) fail("{}", groups.unsupported);
    c.quantized_layers = groups.targets;
  }
  c.pre_quant_scale = parse_pre_quant_scale(qc, where);
  c.lora_rank = parse_lora_rank(qc, c.algo, where);
  // convert_hf_config.py writes NVFP4_SVD's rank inside its config group.
  if (!c.lora_rank && qc.contains("config_groups") && qc["config_groups"].is_object())
    for (const auto& [name, g] : qc["config_groups"].items())
      if (g.is_object() && g.contains("lora_rank")) c.lora_rank = parse_lora_rank(g, c.algo, where + ": config_groups['" + name + "']");
  validate(c, where);
  return c;
}

// What differs between the two files' configs, or "" when they agree.
std::string describe_disagreement(const ModeloptConfig& a, const ModeloptConfig& b) {
  std::vector<std::string> parts;
  if (a.algo != b.algo) parts.push_back(fmt::format("quant_algo {} vs {}", algo_name(a.algo), algo_name(b.algo)));
  if (is_nvfp4(a.algo) && a.algo == b.algo && a.group_size != b.group_size)
    parts.push_back(fmt::format("group_size {} vs {}", a.group_size.value_or(0), b.group_size.value_or(0)));
  auto as_set = [](const std::vector<std::string>& v) { return std::set<std::string>(v.begin(), v.end()); };
  if (as_set(a.exclude_modules) != as_set(b.exclude_modules)) parts.push_back("exclusions differ");
  std::vector<std::string> layers;
  std::set<std::string> keys;
  for (const auto& [m, lq] : a.quantized_layers) keys.insert(m);
  for (const auto& [m, lq] : b.quantized_layers) keys.insert(m);
  for (const std::string& m : keys) {
    auto ia = a.quantized_layers.find(m), ib = b.quantized_layers.find(m);
    QuantAlgo x = ia == a.quantized_layers.end() ? QuantAlgo::None : ia->second.algo;
    QuantAlgo y = ib == b.quantized_layers.end() ? QuantAlgo::None : ib->second.algo;
    if (x != y) layers.push_back(fmt::format("{}: {} vs {}", m, algo_name(x), algo_name(y)));
  }
  if (!layers.empty())
    parts.push_back(fmt::format("{} per-layer entries differ (first: {})", layers.size(), layers.front()));
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : "; ") + p;
  return out;
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
    case QuantAlgo::NVFP4_AWQ: return "NVFP4_AWQ";
    case QuantAlgo::NVFP4_SVD: return "NVFP4_SVD";
    case QuantAlgo::W4A16_AWQ: return "W4A16_AWQ";
    case QuantAlgo::W4A8_NVFP4_FP8: return "W4A8_NVFP4_FP8";
    case QuantAlgo::FP8_PER_CHANNEL_PER_TOKEN: return "FP8_PER_CHANNEL_PER_TOKEN";
    case QuantAlgo::FP8_PB_WO: return "FP8_PB_WO";
    case QuantAlgo::MXFP8: return "MXFP8";
    case QuantAlgo::W8A16: return "W8A16";
    case QuantAlgo::W8A8_SQ_PER_CHANNEL: return "W8A8_SQ_PER_CHANNEL";
    case QuantAlgo::W4A8_MXFP4_FP8: return "W4A8_MXFP4_FP8";
  }
  return "?";
}

std::string_view unsupported_modelopt_algo(const std::string& u) {
  // Every quant_algo ModelOpt's unified HF export writes (modelopt/torch/export/quant_utils.py,
  // process_layer_quant_config; get_quantization_format's raw names), and the ones issue #44 names.
  static const std::map<std::string, std::string_view> known = {
      {"W4A8_AWQ", "int4 weights in groups with AWQ pre_quant_scale and FP8 activations"},
      {"FP8_PB_REAL", "block-wise FP8 weights with FP8 activations"},
      {"MXFP4", "MXFP4 weights (E2M1 with E8M0 scales per 32) and activations"},
  };
  auto it = known.find(u);
  return it == known.end() ? std::string_view() : it->second;
}

QuantAlgo parse_algo(const std::string& name, const std::string& where) {
  std::string u = upper(name);
  if (u == "NVFP4") return QuantAlgo::NVFP4;
  if (u == "W4A16_NVFP4") return QuantAlgo::W4A16_NVFP4;
  if (u == "FP8") return QuantAlgo::FP8;
  if (u == "MIXED_PRECISION") return QuantAlgo::MIXED_PRECISION;
  if (u == "NVFP4_AWQ") return QuantAlgo::NVFP4_AWQ;
  if (u == "NVFP4_SVD") return QuantAlgo::NVFP4_SVD;
  if (u == "W4A16_AWQ") return QuantAlgo::W4A16_AWQ;
  if (u == "W4A8_NVFP4_FP8") return QuantAlgo::W4A8_NVFP4_FP8;
  if (u == "FP8_PER_CHANNEL_PER_TOKEN") return QuantAlgo::FP8_PER_CHANNEL_PER_TOKEN;
  if (u == "FP8_PB_WO") return QuantAlgo::FP8_PB_WO;  // the export writes its raw name, "fp8_pb_wo"
  if (u == "MXFP8") return QuantAlgo::MXFP8;
  if (u == "W8A16") return QuantAlgo::W8A16;
  if (u == "W8A8_SQ_PER_CHANNEL") return QuantAlgo::W8A8_SQ_PER_CHANNEL;
  if (u == "W4A8_MXFP4_FP8") return QuantAlgo::W4A8_MXFP4_FP8;
  if (std::string_view what = unsupported_modelopt_algo(u); !what.empty())
    fail("{}: quant_algo '{}' (ModelOpt's {}) is not supported by fp4lm (supported: {}; docs/FORMAT.md lists each "
         "ModelOpt algorithm)",
         where, name, what, kSupported);
  fail("{}: unknown quant_algo '{}' (supported: {})", where, name, kSupported);
}

ModeloptConfig parse_modelopt_config(const std::optional<json>& hf_quant_config, const json& config_json,
                                     const std::string& dir) {
  std::optional<ModeloptConfig> a, b;
  if (hf_quant_config) a = from_hf_quant_config(*hf_quant_config, dir + "/hf_quant_config.json");
  if (config_json.is_object() && config_json.contains("quantization_config") &&
      !config_json["quantization_config"].is_null()) {
    const bool modelopt_beside = a.has_value();  // hf_quant_config.json is ModelOpt's own format
    b = from_config_json(config_json["quantization_config"], dir + "/config.json: quantization_config",
                         modelopt_beside);
  }
  if (a && b) {
    // ModelOpt's config.json form drops pre_quant_scale (convert_hf_config.py): either file says it.
    b->pre_quant_scale |= a->pre_quant_scale;
    // A KV format only hf_quant_config.json declares is still declared (never dropped silently).
    if (!b->kv_cache_quant_algo) b->kv_cache_quant_algo = a->kv_cache_quant_algo;
    // vLLM reads config.json's quantization_config first; so do we.
    if (std::string d = describe_disagreement(*b, *a); !d.empty()) {
      b->disagreement = d;
      b->other = std::make_shared<const ModeloptConfig>(std::move(*a));
    }
    return *b;
  }
  if (a) return *a;
  if (b) return *b;
  return ModeloptConfig{};
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

QuantAlgo module_algo(const ModeloptConfig& q, const std::string& module) {
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

Scheme scheme_of(QuantAlgo a) {
  switch (a) {
    case QuantAlgo::NVFP4:
    case QuantAlgo::NVFP4_AWQ:
    case QuantAlgo::NVFP4_SVD: return Scheme::nvfp4;
    case QuantAlgo::W4A16_NVFP4: return Scheme::nvfp4_a16;
    case QuantAlgo::FP8: return Scheme::fp8;
    case QuantAlgo::W4A16_AWQ: return Scheme::int4;
    case QuantAlgo::W4A8_NVFP4_FP8: return Scheme::nvfp4_fp8;
    case QuantAlgo::FP8_PER_CHANNEL_PER_TOKEN: return Scheme::fp8_pc_pt;
    case QuantAlgo::FP8_PB_WO: return Scheme::fp8_block_a16;
    case QuantAlgo::MXFP8: return Scheme::mxfp8;
    case QuantAlgo::W8A16: return Scheme::int8_a16;
    case QuantAlgo::W8A8_SQ_PER_CHANNEL: return Scheme::int8_sq;
    case QuantAlgo::W4A8_MXFP4_FP8: return Scheme::mxfp4_fp8;
    case QuantAlgo::None: return Scheme::unquantized;
    case QuantAlgo::MIXED_PRECISION: break;
  }
  fail("MIXED_PRECISION is not the scheme of a module");
}

QuantAlgo algo_of(Scheme s) {
  switch (s) {
    case Scheme::nvfp4: return QuantAlgo::NVFP4;
    case Scheme::nvfp4_a16: return QuantAlgo::W4A16_NVFP4;
    case Scheme::fp8: return QuantAlgo::FP8;
    case Scheme::int4: return QuantAlgo::W4A16_AWQ;
    case Scheme::nvfp4_fp8: return QuantAlgo::W4A8_NVFP4_FP8;
    case Scheme::fp8_pc_pt: return QuantAlgo::FP8_PER_CHANNEL_PER_TOKEN;
    case Scheme::fp8_block_a16: return QuantAlgo::FP8_PB_WO;
    case Scheme::mxfp8: return QuantAlgo::MXFP8;
    case Scheme::int8_a16: return QuantAlgo::W8A16;
    case Scheme::int8_sq: return QuantAlgo::W8A8_SQ_PER_CHANNEL;
    case Scheme::mxfp4_fp8: return QuantAlgo::W4A8_MXFP4_FP8;
    case Scheme::unquantized: return QuantAlgo::None;
    default: break;
  }
  fail("ModelOpt has no quant_algo for {}", scheme_name(s));
}

const ModeloptConfig& as_modelopt(const QuantConfig& q) {
  if (const auto* m = dynamic_cast<const ModeloptConfig*>(&q)) return *m;
  fail("{}: a {} config, not ModelOpt's", q.source(), family_name(q.family()));
}

std::string ModeloptConfig::describe() const {
  return fmt::format("ModelOpt {} checkpoint (quant_algo={})", algo_name(algo), algo_name(algo));
}

bool ModeloptConfig::declares(Scheme s) const {
  if (algo != QuantAlgo::MIXED_PRECISION) return algo != QuantAlgo::None && scheme_of(algo) == s;
  return std::any_of(quantized_layers.begin(), quantized_layers.end(),
                     [&](const auto& e) { return scheme_of(e.second.algo) == s; });
}

Int4Layout ModeloptConfig::int4_layout(const std::string& module) const {
  Int4Layout l;  // symmetric (has_zero_point false), no act-order
  std::optional<int> gs = group_size;
  if (algo == QuantAlgo::MIXED_PRECISION)
    for (const auto& [m, lq] : quantized_layers)
      if (lq.algo == QuantAlgo::W4A16_AWQ && (module == m || module.starts_with(m + "."))) gs = lq.group_size;
  l.group = gs.value_or(0);
  return l;
}

std::pair<int64_t, int64_t> ModeloptConfig::weight_block(const std::string& module) const {
  const QuantAlgo a = module_algo(*this, module);
  if (a == QuantAlgo::FP8_PB_WO) return {kFp8PbWoBlock, kFp8PbWoBlock};
  if (a == QuantAlgo::MXFP8) return {1, 32};  // one E8M0 scale per 32 inputs of a row
  return {0, 0};
}

bool ModeloptConfig::excluded(const std::string& module) const { return is_excluded(exclude_modules, module); }

std::optional<Scheme> ModeloptConfig::listed_scheme(const std::string& layer) const {
  // MIXED_PRECISION may list the engine's own (fused) name.
  if (algo != QuantAlgo::MIXED_PRECISION || other || is_excluded(exclude_modules, layer)) return std::nullopt;
  auto it = quantized_layers.find(layer);
  if (it == quantized_layers.end()) return std::nullopt;
  return scheme_of(it->second.algo);
}

namespace {

bool stored_unquantized(const ModuleTensors& tensors, const std::string& module) {
  const std::optional<DType> w = tensors.dtype(module + ".weight");
  return (w == DType::BF16 || w == DType::F16 || w == DType::F32) && !tensors.dtype(module + ".weight_scale");
}

}  // namespace

Scheme ModeloptConfig::module_scheme(const std::string& module, const ModuleTensors& tensors) const {
  const QuantAlgo a = module_algo(*this, module);
  // A file that lists no exclusions (Nemotron-style minimal): what is stored unquantized
  // (lm_head, typically) is excluded.
  if (!exclusions_listed && a != QuantAlgo::None && tensors && stored_unquantized(tensors, module))
    return Scheme::unquantized;
  if (!other) return scheme_of(a);
  // The two files disagree: the module's tensors decide where they resolve it differently.
  const QuantAlgo b = module_algo(*other, module);
  if (a == b) return scheme_of(a);
  if (!tensors)
    fail("{}: the config files disagree on {} ({} vs {}) and no tensors were given to decide", source_path, module,
         algo_name(a), algo_name(b));
  return tensors.scheme(module);
}

std::string ModeloptConfig::warning(const std::vector<std::string>& modules, const ModuleTensors& tensors) const {
  if (!other) return "";
  std::map<std::string, int64_t> chosen;  // "A in config.json, B in hf_quant_config.json -> C" -> modules
  std::string example;
  for (const std::string& m : modules) {
    const QuantAlgo a = module_algo(*this, m), b = module_algo(*other, m);
    if (a == b) continue;
    const std::string_view t = tensors ? scheme_name(tensors.scheme(m)) : algo_name(a);
    ++chosen[fmt::format("{} per {}, {} per {} -> {}", algo_name(a), "config.json", algo_name(b),
                         "hf_quant_config.json", t)];
    if (example.empty()) example = m;
  }
  std::string what;
  for (const auto& [k, n] : chosen) what += fmt::format("{}{} module(s) {}", what.empty() ? "" : "; ", n, k);
  if (what.empty()) what = "no module of the model is affected";
  else what += fmt::format(" (e.g. {})", example);
  return fmt::format("{} and {} disagree ({}); using config.json's quantization_config (as vLLM does), and where "
                     "the two resolve a module differently its tensors decide (input_scale present: W4A4/W8A8, "
                     "absent: weight-only): {}",
                     source_path, other->source_path, disagreement, what);
}

std::shared_ptr<const QuantConfig> ModeloptConfig::with_prefix(const std::string& from, const std::string& to) const {
  auto strip = [&](const std::string& m) {
    return m.compare(0, from.size(), from) == 0 ? to + m.substr(from.size()) : m;
  };
  auto rename = [&](ModeloptConfig& q) {
    for (std::string& m : q.exclude_modules) m = strip(m);
    std::map<std::string, LayerQuant> layers;
    for (const auto& [m, lq] : q.quantized_layers) layers[strip(m)] = lq;
    q.quantized_layers = std::move(layers);
  };
  auto out = std::make_shared<ModeloptConfig>(*this);
  rename(*out);
  if (out->other) {  // the other file of a disagreeing pair names the same modules
    auto o = std::make_shared<ModeloptConfig>(*out->other);
    rename(*o);
    out->other = std::move(o);
  }
  return out;
}

}  // namespace fp4lm::quant
