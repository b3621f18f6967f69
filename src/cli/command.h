#pragma once
// Subcommands register themselves: each cmd_*.cpp defines one static CommandRegistration, so
// adding a subcommand touches no other file.
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace fp4lm::cli {

// setup() adds the subcommand's options to `sub` and returns the function that runs it.
// The runner returns the process exit code; it may throw fp4lm::Error (exit 1) or
// fp4lm::UsageError (exit 2).
using Runner = std::function<int()>;
using Setup = std::function<Runner(CLI::App& sub)>;

struct Command {
  std::string name;
  std::string description;
  Setup setup;
};

std::vector<Command>& command_table();

struct CommandRegistration {
  CommandRegistration(std::string name, std::string description, Setup setup) {
    command_table().push_back({std::move(name), std::move(description), std::move(setup)});
  }
};

}  // namespace fp4lm::cli
