#pragma once
// The engine flags shared by every subcommand that loads a model.
#include <string>

#include <CLI/CLI.hpp>

#include "model/engine_options.h"

namespace fp4lm::cli {

struct EngineFlags {
  std::string dtype = "auto";
  std::string override_activation_dtype = "auto";
  std::string kv_cache_dtype = "auto";
  std::string linear_backend, moe_backend;
  int64_t a16_max_tokens = 0;
  int threads = 0;

  // Validates the values (UsageError -> exit 2), sets the global thread pool size, and
  // returns the engine options.
  model::EngineOptions resolve() const;
};

// `with_dtype`: whether --dtype applies (inspect has no use for it).
void add_engine_flags(CLI::App& sub, EngineFlags& flags, bool with_dtype = true);

}  // namespace fp4lm::cli
