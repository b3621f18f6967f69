#pragma once
// The message of the fp4lm::Error that f throws, or "" when it throws none.
#include <functional>
#include <string>

#include "core/error.h"

namespace fp4lm::test {

inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace fp4lm::test
