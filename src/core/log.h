#pragma once
// The engine's single logger. Level from --log-level or FP4LM_LOG_LEVEL (trace, debug, info,
// warn, error, off); default info. Logs go to stderr so stdout stays clean for results.
#include <string>

#include <spdlog/spdlog.h>

namespace fp4lm {

spdlog::logger& log();

// Throws UsageError on an unknown level name.
void set_log_level(const std::string& level);

}  // namespace fp4lm
