#include "quant/int4_producer_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace fp4lm::quant {

using nlohmann::json;

namespace {

// Keys that record how the weights were calibrated or which GPU kernel a runtime should pick; the
// stored tensors do not depend on them.
const std::vector<std::string> kGptqNoEffect = {
    "damp_percent", "damp_auto_increment", "true_sequential", "static_groups", "model_name_or_path",
    "model_file_base_name", "meta", "tokenizer", "dataset", "use_cuda_fp16", "model_seqlen",
    "block_name_to_quantize", "module_name_preceding_first_block", "batch_size", "pad_token_id",
    "use_exllama", "disable_exllama", "max_input_length", "exllama_config", "cache_block_outputs",
    "modules_in_block_to_quantize", "backend", "mse", "act_group_aware", "v2", "v2_alpha", "quantizer", "uri",
    "adapter", "rotation", "is_marlin_format"};
const std::vector<std::string> kAwqNoEffect = {"backend", "do_fuse", "fuse_max_seq_len", "modules_to_fuse",
                                               "exllama_config"};

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool contains(const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); }

int64_t int_key(const json& qc, const char* key, const std::string& where, int64_t dflt) {
  if (!qc.contains(key) || qc[key].is_null()) return dflt;
  if (!qc[key].is_number_integer()) fail("{}: '{}' must be an integer, found {}", where, key, qc[key].dump());
  return qc[key].get<int64_t>();
}
bool bool_key(const json& qc, const char* key, const std::string& where, bool dflt) {
  if (!qc.contains(key) || qc[key].is_null()) return dflt;
  if (!qc[key].is_boolean()) fail("{}: '{}' must be true or false, found {}", where, key, qc[key].dump());
  return qc[key].get<bool>();
}
std::string str_key(const json& qc, const char* key, const std::string& where) {
  if (!qc.contains(key) || qc[key].is_null()) return "";
  if (!qc[key].is_string()) fail("{}: '{}' must be a string, found {}", where, key, qc[key].dump());
  return qc[key].get<std::string>();
}

// Glob match of the whole string ('*' any run of characters).
bool glob_match(const std::string& pat, size_t pi, const std::string& s, size_t si) {
  for (; pi < pat.size(); ++pi) {
    if (pat[pi] == '*') {
      for (size_t k = si; k <= s.size(); ++k)
        if (glob_match(pat, pi + 1, s, k)) return true;
      return false;
    }
    if (si >= s.size() || s[si] != pat[pi]) return false;
    ++si;
  }
  return si == s.size();
}

}  // namespace

Int4ProducerConfig parse_int4_producer_config(const json& qc, const std::string& where, Family producer) {
  if (!qc.is_object()) fail("{}: expected an object, found {}", where, qc.type_name());
  Int4ProducerConfig c;
  c.producer = producer;
  c.source_path = where;
  const bool gptq = producer == Family::gptq;
  const std::vector<std::string> effect =
      gptq ? std::vector<std::string>{"quant_method", "bits", "group_size", "desc_act", "sym", "checkpoint_format",
                                      "format", "lm_head", "dynamic", "pack_dtype"}
           : std::vector<std::string>{"quant_method", "bits", "group_size", "zero_point", "version",
                                      "modules_to_not_convert"};
  for (const auto& [key, value] : qc.items())
    if (!contains(effect, key) && !contains(gptq ? kGptqNoEffect : kAwqNoEffect, key))
      fail("{}: unknown {} key '{}' (fp4lm reads {}; docs/FORMAT.md, \"int4\")", where, gptq ? "GPTQ" : "AWQ", key,
           fmt::join(effect, ", "));
  const int64_t bits = int_key(qc, "bits", where, -1);
  if (bits != 4)
    fail("{}: bits is {}, expected 4 (fp4lm reads 4-bit {} checkpoints only)", where,
         qc.contains("bits") ? qc["bits"].dump() : std::string("absent"), gptq ? "GPTQ" : "AWQ");
  c.group_size = int_key(qc, "group_size", where, -1);
  if (c.group_size == 0 || c.group_size < -1)
    fail("{}: group_size is {}, expected -1 (one group per row) or a positive number", where, c.group_size);
  if (gptq) {
    c.sym = bool_key(qc, "sym", where, true);
    c.desc_act = bool_key(qc, "desc_act", where, false);
    std::string fmt_ = str_key(qc, "checkpoint_format", where);
    const std::string format = str_key(qc, "format", where);
    if (fmt_.empty()) fmt_ = format;
    if (!format.empty() && lower(format) != lower(fmt_))
      fail("{}: checkpoint_format '{}' and format '{}' disagree", where, fmt_, format);
    c.version = fmt_.empty() ? "gptq" : fmt_;
    if (lower(c.version) == "gptq")
      c.zeros_minus_one = true;
    else if (lower(c.version) != "gptq_v2")
      fail("{}: checkpoint_format '{}' is not supported (expected \"gptq\" or \"gptq_v2\"; the Marlin, BitBLAS, "
           "QQQ and other repacked layouts are not read)",
           where, c.version);
    if (bool_key(qc, "is_marlin_format", where, false))
      fail("{}: is_marlin_format is true: the Marlin-repacked GPTQ layout is not supported (expected the gptq "
           "layout)",
           where);
    if (qc.contains("dynamic") && !qc["dynamic"].is_null() && !(qc["dynamic"].is_object() && qc["dynamic"].empty()))
      fail("{}: 'dynamic' holds per-module overrides ({}), which fp4lm does not apply; expected null or {{}}", where,
           qc["dynamic"].dump());
    const std::string pack = str_key(qc, "pack_dtype", where);
    if (!pack.empty() && pack != "int32") fail("{}: pack_dtype is '{}', expected \"int32\"", where, pack);
    if (qc.contains("lm_head")) (void)bool_key(qc, "lm_head", where, false);  // the tensors say which
  } else {
    c.sym = false;
    if (!bool_key(qc, "zero_point", where, true))
      fail("{}: zero_point is false; AutoAWQ's GEMM export stores zero points (expected true)", where);
    c.version = str_key(qc, "version", where);
    if (c.version.empty()) c.version = "gemm";
    if (lower(c.version) != "gemm")
      fail("{}: version '{}' is not supported (expected \"gemm\"; AWQ's GEMV, GEMV_fast, Marlin, ExLlama and IPEX "
           "layouts are not read)",
           where, c.version);
    if (qc.contains("modules_to_not_convert") && !qc["modules_to_not_convert"].is_null()) {
      const json& l = qc["modules_to_not_convert"];
      if (!l.is_array()) fail("{}: modules_to_not_convert must be a list of module names, found {}", where, l.dump());
      for (const json& v : l) {
        if (!v.is_string()) fail("{}: modules_to_not_convert must hold strings, found {}", where, v.dump());
        c.not_converted.push_back(v.get<std::string>());
      }
    }
  }
  return c;
}

std::string Int4ProducerConfig::describe() const {
  const std::string group = group_size < 0 ? std::string("per channel") : fmt::format("group_size {}", group_size);
  if (producer == Family::gptq)
    return fmt::format("GPTQ int4 checkpoint (quant_method=gptq, {}, {}{}, checkpoint_format {})", group,
                       sym ? "symmetric" : "asymmetric", desc_act ? ", desc_act" : "", version);
  return fmt::format("AWQ int4 checkpoint (quant_method=awq, {}, zero points, version {}{})", group, version,
                     not_converted.empty() ? std::string()
                                           : fmt::format(", not converted: {}", fmt::join(not_converted, ", ")));
}

bool Int4ProducerConfig::excluded(const std::string& module) const {
  // AutoAWQ skips a module when any entry is a substring of its name.
  for (const std::string& e : not_converted)
    if (module.find(e) != std::string::npos || glob_match(e, 0, module, 0)) return true;
  return false;
}

Scheme Int4ProducerConfig::module_scheme(const std::string& module, const ModuleTensors& tensors) const {
  if (tensors) return tensors.scheme(module);
  if (excluded(module) || module == "lm_head" || module.ends_with(".lm_head") || module.ends_with("embed_tokens"))
    return Scheme::unquantized;
  return Scheme::int4;
}

Int4Layout Int4ProducerConfig::int4_layout(const std::string&) const {
  Int4Layout l;
  l.group = group_size < 0 ? 0 : group_size;
  l.symmetric = sym;
  l.act_order = desc_act;
  l.zeros_minus_one = zeros_minus_one;
  return l;
}

std::shared_ptr<const QuantConfig> Int4ProducerConfig::with_prefix(const std::string&, const std::string&) const {
  return std::make_shared<Int4ProducerConfig>(*this);  // the tensors decide
}

}  // namespace fp4lm::quant
