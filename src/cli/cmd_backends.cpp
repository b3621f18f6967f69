// `fp4lm backends`: the kernel-backend registry (the oracle's table), in priority order, then the
// attention kernel's variants.
#include <cstdio>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/cpu_features.h"
#include "kernels/attention.h"
#include "kernels/registry.h"

namespace fp4lm::cli {
namespace {

nlohmann::json describe(const kernels::Backend& b) {
  std::vector<std::string> schemes, dtypes;
  for (const auto& k : b.schemes) schemes.push_back(std::string(kernels::scheme_name(k)));
  for (DType d : b.act_dtypes) dtypes.push_back(std::string(dtype_torch_name(d)));
  std::string why = b.unavailable_reason ? b.unavailable_reason() : "";
  return {{"name", b.name},
          {"kind", b.kind == kernels::LayerKind::linear ? "linear" : "moe"},
          {"device", b.device},
          {"schemes", schemes},
          {"match", b.weight_key_only ? "weight key only" : "weight and activation keys"},
          {"activation_dtypes", dtypes},
          {"available", why.empty()},
          {"unavailable_reason", why}};
}

CommandRegistration reg("backends", "List the kernel backends, in the order the oracle tries them", [](CLI::App& sub) {
  auto as_json = std::make_shared<bool>(false);
  sub.add_flag("--json", *as_json, "Print a JSON array");
  return [as_json]() -> int {
    nlohmann::json all = nlohmann::json::array();
    for (const kernels::Backend* b : kernels::all_backends()) all.push_back(describe(*b));
    // The attention kernel's variants, listed after the oracle's table: the first available one
    // runs (FP4LM_ATTENTION_KERNEL forces another); "selected" marks it.
    const kernels::AttentionKernel& chosen = kernels::attention_kernel();
    for (const kernels::AttentionKernel* k : kernels::attention_kernels()) {
      const std::string why = k->unavailable_reason();
      all.push_back({{"name", k->name},
                     {"kind", "attention"},
                     {"device", "cpu"},
                     {"kv_cache_dtypes", {"float32", "bfloat16", "float16", "fp8"}},
                     {"available", why.empty()},
                     {"unavailable_reason", why},
                     {"selected", k == &chosen}});
    }
    if (*as_json) {
      std::printf("%s\n", all.dump(2).c_str());
      return 0;
    }
    std::printf("cpu: %s\n", cpu_features().describe().c_str());
    for (const auto& b : all) {
      if (b["kind"] == "attention") {
        std::printf("%-18s %-9s cpu  kv_cache_dtypes=[float32, bfloat16, float16, fp8]  %s%s\n",
                    b["name"].get<std::string>().c_str(), "attention",
                    b["available"].get<bool>() ? "available"
                                               : ("unavailable: " + b["unavailable_reason"].get<std::string>()).c_str(),
                    b["selected"].get<bool>() ? " (selected)" : "");
        continue;
      }
      std::string status = b["available"].get<bool>() ? "available"
                                                       : "unavailable: " + b["unavailable_reason"].get<std::string>();
      std::printf("%-18s %-6s %-4s schemes=[%s] (%s) dtypes=[%s]  %s\n", b["name"].get<std::string>().c_str(),
                  b["kind"].get<std::string>().c_str(), b["device"].get<std::string>().c_str(),
                  fmt::format("{}", fmt::join(b["schemes"].get<std::vector<std::string>>(), ", ")).c_str(),
                  b["match"].get<std::string>().c_str(),
                  fmt::format("{}", fmt::join(b["activation_dtypes"].get<std::vector<std::string>>(), ", ")).c_str(),
                  status.c_str());
    }
    return 0;
  };
});

}  // namespace
}  // namespace fp4lm::cli
