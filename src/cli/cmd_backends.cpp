// `fp4lm backends`: every kernel family's registered variants, in the order they are tried: the
// oracle's Linear and MoE backends (GEMM: NVFP4, FP8, dense), then the attention, delta-rule and
// SSM-scan (Mamba-2) variants. Each says which instruction set it was built for, the CPU features it uses, and
// whether it can run here (the one ISA decision, kernels/isa.h; FP4LM_DISABLE_ISA included).
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/cpu_features.h"
#include "kernels/attention.h"
#include "kernels/delta_rule.h"
#include "kernels/registry.h"
#include "kernels/ssm_scan.h"

namespace fp4lm::cli {
namespace {

nlohmann::json isa_fields(const kernels::IsaNeeds& isa, const std::string& why) {
  return {{"isa", std::string(kernels::isa_name(isa.isa))},
          {"cpu_features", isa.cpu.empty() ? "" : isa.cpu.names()},
          {"available", why.empty()},
          {"unavailable_reason", why}};
}

nlohmann::json describe(const kernels::Backend& b) {
  std::vector<std::string> schemes, dtypes;
  for (const auto& k : b.schemes) schemes.push_back(std::string(kernels::scheme_name(k)));
  for (DType d : b.act_dtypes) dtypes.push_back(std::string(dtype_torch_name(d)));
  nlohmann::json j = {{"name", b.name},
                      {"kind", b.kind == kernels::LayerKind::linear ? "linear" : "moe"},
                      {"device", b.device},
                      {"schemes", schemes},
                      {"match", b.weight_key_only ? "weight key only" : "weight and activation keys"},
                      {"activation_dtypes", dtypes}};
  j.update(isa_fields(b.isa, b.unavailable_reason ? b.unavailable_reason() : ""));
  return j;
}

nlohmann::json describe(const kernels::AttentionKernel& k, bool selected) {
  std::vector<std::string> dtypes;
  for (DType d : kernels::AttentionKernel::kv_dtypes)
    dtypes.push_back(d == DType::F8_E4M3 ? "fp8" : std::string(dtype_torch_name(d)));
  nlohmann::json j = {{"name", k.name}, {"kind", "attention"}, {"device", "cpu"}, {"kv_cache_dtypes", dtypes}};
  j.update(isa_fields(k.isa, k.unavailable_reason()));
  j["selected"] = selected;
  return j;
}

nlohmann::json describe(const kernels::DeltaRuleKernel& k, bool selected) {
  nlohmann::json j = {{"name", k.name}, {"kind", "delta_rule"}, {"device", "cpu"}, {"forms", {"recurrent", "chunked"}}};
  j.update(isa_fields(k.isa, k.unavailable_reason()));
  j["selected"] = selected;
  return j;
}

nlohmann::json describe(const kernels::SsmScanKernel& k, bool selected) {
  nlohmann::json j = {{"name", k.name}, {"kind", "ssm_scan"}, {"device", "cpu"}, {"forms", {"recurrent"}}};
  j.update(isa_fields(k.isa, k.unavailable_reason()));
  j["selected"] = selected;
  return j;
}

std::string status(const nlohmann::json& b) {
  std::string s = b["available"].get<bool>() ? "available" : "unavailable: " + b["unavailable_reason"].get<std::string>();
  if (b.contains("selected") && b["selected"].get<bool>()) s += " (selected)";
  return s;
}

std::string joined(const nlohmann::json& list) {
  return fmt::format("{}", fmt::join(list.get<std::vector<std::string>>(), ", "));
}

CommandRegistration reg("backends", "List every kernel family's backends, in the order they are tried", [](CLI::App& sub) {
  auto as_json = std::make_shared<bool>(false);
  sub.add_flag("--json", *as_json, "Print a JSON array");
  return [as_json]() -> int {
    nlohmann::json all = nlohmann::json::array();
    for (const kernels::Backend* b : kernels::all_backends()) all.push_back(describe(*b));
    // The attention, delta-rule and SSM-scan families: the first available variant runs
    // ("selected"; FP4LM_ATTENTION_KERNEL forces another attention variant).
    const kernels::AttentionKernel& attention = kernels::attention_kernel();
    for (const kernels::AttentionKernel* k : kernels::attention_kernels()) all.push_back(describe(*k, k == &attention));
    const kernels::DeltaRuleKernel& rule = kernels::delta_rule_kernel();
    for (const kernels::DeltaRuleKernel* k : kernels::delta_rule_kernels()) all.push_back(describe(*k, k == &rule));
    const kernels::SsmScanKernel& scan = kernels::ssm_scan_kernel();
    for (const kernels::SsmScanKernel* k : kernels::ssm_scan_kernels()) all.push_back(describe(*k, k == &scan));
    if (*as_json) {
      std::printf("%s\n", all.dump(2).c_str());
      return 0;
    }
    std::printf("cpu: %s\n", cpu_features().describe().c_str());
    for (const auto& b : all) {
      const std::string kind = b["kind"].get<std::string>();
      std::string what;
      if (kind == "attention") what = "kv_cache_dtypes=[" + joined(b["kv_cache_dtypes"]) + "]";
      else if (kind == "delta_rule" || kind == "ssm_scan") what = "forms=[" + joined(b["forms"]) + "]";
      else
        what = fmt::format("schemes=[{}] ({}) dtypes=[{}]", joined(b["schemes"]), b["match"].get<std::string>(),
                           joined(b["activation_dtypes"]));
      std::printf("%-20s %-10s %-4s %-8s %s  %s\n", b["name"].get<std::string>().c_str(), kind.c_str(),
                  b["device"].get<std::string>().c_str(), b["isa"].get<std::string>().c_str(), what.c_str(),
                  status(b).c_str());
    }
    return 0;
  };
});

}  // namespace
}  // namespace fp4lm::cli
