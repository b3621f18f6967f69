#pragma once
// Collects what the engine's logger writes at a level and above while the object lives.
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

#include "core/log.h"

namespace fp4lm::test {

// Collects what the engine logs at `level` and above while alive.
class LogCapture {
 public:
  explicit LogCapture(spdlog::level::level_enum level = spdlog::level::info)
      : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)), old_(fp4lm::log().level()) {
    sink_->set_level(level);
    fp4lm::log().sinks().push_back(sink_);
    fp4lm::log().set_level(std::min(level, old_));
  }
  ~LogCapture() {
    auto& s = fp4lm::log().sinks();
    s.erase(std::remove(s.begin(), s.end(), sink_), s.end());
    fp4lm::log().set_level(old_);
  }
  std::string text() const { return out_.str(); }
  int count(const std::string& needle) const {
    int n = 0;
    const std::string t = text();
    for (size_t p = t.find(needle); p != std::string::npos; p = t.find(needle, p + 1)) ++n;
    return n;
  }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
  spdlog::level::level_enum old_;
};

}  // namespace fp4lm::test
