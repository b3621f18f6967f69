#include "quant/fine_grained_fp8_config.h"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace fp4lm::quant {

using nlohmann::json;

namespace {

std::vector<std::string> split_dots(const std::string& s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e = s.find('.'); e != std::string::npos; b = e + 1, e = s.find('.', b)) out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

void read_names(const json& qc, const char* key, const std::string& where, std::vector<std::string>& out) {
  if (!qc.contains(key) || qc[key].is_null()) return;
  if (!qc[key].is_array()) fail("{}: {} must be a list of module names, found {}", where, key, qc[key].dump());
  for (const json& v : qc[key]) {
    if (!v.is_string()) fail("{}: {} must hold strings, found {}", where, key, v.dump());
    out.push_back(v.get<std::string>());
  }
}

}  // namespace

FineGrainedFp8Config parse_fine_grained_fp8_config(const json& qc, const std::string& where) {
  if (!qc.is_object()) fail("{}: expected an object, found {}", where, qc.type_name());
  FineGrainedFp8Config c;
  c.source_path = where;
  const json bs = qc.contains("weight_block_size") ? qc["weight_block_size"] : json();
  if (bs.is_null())
    fail("{}: quant_method fp8 without weight_block_size (per-tensor FP8 in this form) is not supported; fp4lm "
         "reads block-wise FP8 (weight_block_size [128, 128]) and per-tensor FP8 from ModelOpt or compressed-tensors",
         where);
  if (!bs.is_array() || bs.size() != 2 || !bs[0].is_number_integer() || !bs[1].is_number_integer() ||
      bs[0].get<int64_t>() <= 0 || bs[1].get<int64_t>() <= 0)
    fail("{}: weight_block_size must be two positive integers [rows, columns], found {}", where, bs.dump());
  c.block_n = bs[0].get<int64_t>();
  c.block_k = bs[1].get<int64_t>();
  if (qc.contains("activation_scheme") && !qc["activation_scheme"].is_null()) {
    if (!qc["activation_scheme"].is_string() || qc["activation_scheme"].get<std::string>() != "dynamic")
      fail("{}: activation_scheme {}: block-wise FP8 activations are quantized per token at run time "
           "(\"dynamic\"); static activation scales are not supported",
           where, qc["activation_scheme"].dump());
  }
  if (qc.contains("fmt") && !qc["fmt"].is_null()) {
    const std::string f = qc["fmt"].is_string() ? qc["fmt"].get<std::string>() : qc["fmt"].dump();
    if (f != "e4m3" && f != "float8_e4m3fn")
      fail("{}: fmt '{}': fp4lm reads E4M3 weights (\"e4m3\" / \"float8_e4m3fn\")", where, f);
  }
  read_names(qc, "modules_to_not_convert", where, c.not_converted);
  read_names(qc, "ignored_layers", where, c.not_converted);
  return c;
}

std::string FineGrainedFp8Config::describe() const {
  return fmt::format("block-wise FP8 checkpoint (quant_method=fp8, weight_block_size=[{}, {}], dynamic "
                     "per-token-group activations{})",
                     block_n, block_k,
                     not_converted.empty() ? std::string()
                                           : fmt::format(", not converted: {}", fmt::join(not_converted, ", ")));
}

bool FineGrainedFp8Config::excluded(const std::string& module) const {
  const std::vector<std::string> parts = split_dots(module);
  for (const std::string& entry : not_converted) {
    const std::vector<std::string> e = split_dots(entry);
    for (size_t i = 0; i + e.size() <= parts.size(); ++i)
      if (std::equal(e.begin(), e.end(), parts.begin() + static_cast<std::ptrdiff_t>(i))) return true;
  }
  return false;
}

Scheme FineGrainedFp8Config::module_scheme(const std::string& module, const ModuleTensors& tensors) const {
  // Stored in a float dtype: unquantized; anything else is read (and checked) as block FP8.
  if (tensors) return tensors.scheme(module) == Scheme::unquantized ? Scheme::unquantized : Scheme::fp8_block;
  return excluded(module) ? Scheme::unquantized : Scheme::fp8_block;
}

std::shared_ptr<const QuantConfig> FineGrainedFp8Config::with_prefix(const std::string&, const std::string&) const {
  // Names are not matched against the tensors' names here (the tensors decide), so a prefix
  // changes nothing.
  return std::make_shared<FineGrainedFp8Config>(*this);
}

}  // namespace fp4lm::quant
