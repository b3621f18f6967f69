#include "quant/mxfp4_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"

namespace fp4lm::quant {

using nlohmann::json;

namespace {

// Glob match of the whole string: '*' matches any run of characters (dots included).
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

bool ends_with(const std::string& s, const std::string& t) {
  return s.size() >= t.size() && s.compare(s.size() - t.size(), t.size(), t) == 0;
}

}  // namespace

Mxfp4Config parse_mxfp4_config(const json& qc, const std::string& where) {
  if (!qc.is_object()) fail("{}: expected an object, found {}", where, qc.type_name());
  Mxfp4Config c;
  c.source_path = where;
  if (qc.contains("modules_to_not_convert") && !qc["modules_to_not_convert"].is_null()) {
    const json& l = qc["modules_to_not_convert"];
    if (!l.is_array()) fail("{}: modules_to_not_convert must be a list of module names, found {}", where, l.dump());
    for (const json& v : l) {
      if (!v.is_string()) fail("{}: modules_to_not_convert must hold strings, found {}", where, v.dump());
      c.not_converted.push_back(v.get<std::string>());
    }
  }
  return c;
}

std::string Mxfp4Config::describe() const {
  return fmt::format("MXFP4 checkpoint (quant_method=mxfp4: MoE experts as E2M1 blocks with E8M0 scales{})",
                     not_converted.empty() ? std::string()
                                           : fmt::format(", not converted: {}", fmt::join(not_converted, ", ")));
}

bool Mxfp4Config::excluded(const std::string& module) const {
  for (const std::string& e : not_converted) {
    if (glob_match(e, 0, module, 0)) return true;
    // A module above this one: the entry matches a prefix that ends at a dot.
    for (size_t dot = module.find('.'); dot != std::string::npos; dot = module.find('.', dot + 1))
      if (glob_match(e, 0, module.substr(0, dot), 0)) return true;
  }
  return false;
}

Scheme Mxfp4Config::module_scheme(const std::string& module, const ModuleTensors& tensors) const {
  if (tensors) return tensors.scheme(module);
  if (excluded(module)) return Scheme::unquantized;
  // Only the experts' fused parameters are quantized (transformers replaces only GptOssExperts).
  return ends_with(module, ".experts.gate_up_proj") || ends_with(module, ".experts.down_proj") ? Scheme::mxfp4
                                                                                              : Scheme::unquantized;
}

std::shared_ptr<const QuantConfig> Mxfp4Config::with_prefix(const std::string&, const std::string&) const {
  // The tensors decide; the list is only consulted without them.
  return std::make_shared<Mxfp4Config>(*this);
}

}  // namespace fp4lm::quant
