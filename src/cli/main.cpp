// The fp4lm program: global flags, then one subcommand from the registration table.
#include <cstdio>
#include <map>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"

namespace fp4lm::cli {

std::vector<Command>& command_table() {
  static std::vector<Command> table;
  return table;
}

}  // namespace fp4lm::cli

int main(int argc, char** argv) {
  using namespace fp4lm;
  CLI::App app{"fp4lm: NVFP4 (ModelOpt) LLM inference engine", "fp4lm"};
  app.set_version_flag("--version", std::string("fp4lm ") + FP4LM_VERSION);
  app.require_subcommand(1);
  std::string log_level;
  app.add_option("--log-level", log_level,
                 "trace, debug, info, warn, error, off (default: $FP4LM_LOG_LEVEL or info)");

  auto& table = cli::command_table();
  std::sort(table.begin(), table.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::map<CLI::App*, cli::Runner> runners;
  for (auto& cmd : table) {
    CLI::App* sub = app.add_subcommand(cmd.name, cmd.description);
    // Every subcommand also accepts --log-level after its name.
    sub->add_option("--log-level", log_level, "log level");
    runners[sub] = cmd.setup(*sub);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  try {
    if (!log_level.empty()) set_log_level(log_level);
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const UsageError& e) {
    std::fprintf(stderr, "fp4lm: error: %s\n", e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "fp4lm: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fp4lm: internal error: %s\n", e.what());
    return 1;
  }
  return 2;
}
