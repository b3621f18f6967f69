// `fp4lm version`: the program version and the CPU features kernels dispatch on.
#include <cstdio>

#include "cli/command.h"
#include "core/cpu_features.h"

namespace fp4lm::cli {
namespace {

CommandRegistration reg("version", "Print the version and detected CPU features", [](CLI::App&) {
  return []() -> int {
    std::printf("fp4lm %s\ncpu: %s (%d physical cores, %d logical)\n", FP4LM_VERSION,
                cpu_features().describe().c_str(), cpu_features().physical_cores,
                cpu_features().logical_cores);
    return 0;
  };
});

}  // namespace
}  // namespace fp4lm::cli
