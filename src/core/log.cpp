#include "core/log.h"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>

#include "core/error.h"

namespace fp4lm {

static spdlog::level::level_enum parse_level(const std::string& name) {
  auto level = spdlog::level::from_str(name);
  // from_str maps unknown names to "off"; only accept "off" when it was asked for.
  if (level == spdlog::level::off && name != "off") {
    usage_fail("unknown log level '{}' (expected trace, debug, info, warn, error, critical, off)", name);
  }
  return level;
}

spdlog::logger& log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::stderr_color_st("fp4lm");
    l->set_pattern("%^%L%$ %H:%M:%S.%e %v");
    l->set_level(spdlog::level::info);
    if (const char* env = std::getenv("FP4LM_LOG_LEVEL"); env && *env) {
      try {
        l->set_level(parse_level(env));
      } catch (const UsageError&) {
        l->warn("ignoring FP4LM_LOG_LEVEL='{}': not a log level", env);
      }
    }
    return l;
  }();
  return *logger;
}

void set_log_level(const std::string& level) { log().set_level(parse_level(level)); }

}  // namespace fp4lm
