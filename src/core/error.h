#pragma once
// One exception hierarchy for the whole engine (docs/ARCHITECTURE.md, "The layers"). Messages carry their context:
// the file, the tensor, and what was expected versus found.
#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace fp4lm {

// A runtime failure: bad files, inconsistent checkpoints, unsupported models. CLI exit code 1.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The user asked for something malformed (bad flag value, unknown backend name). CLI exit code 2.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what) : Error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

template <typename... Args>
[[noreturn]] void usage_fail(fmt::format_string<Args...> f, Args&&... args) {
  throw UsageError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace fp4lm
