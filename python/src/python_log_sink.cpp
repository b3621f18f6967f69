#include "python_log_sink.h"

#include <memory>
#include <spdlog/details/null_mutex.h>
#include <string>

#include <pybind11/pybind11.h>
#include <spdlog/sinks/base_sink.h>

#include "core/log.h"

namespace py = pybind11;

namespace fp4lm::python {
namespace {

int python_level(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
    case spdlog::level::debug: return 10;
    case spdlog::level::info: return 20;
    case spdlog::level::warn: return 30;
    case spdlog::level::err: return 40;
    case spdlog::level::critical: return 50;
    default: return 0;
  }
}

// Messages may come from the engine's threads (loading runs with the GIL released), so every
// call takes the GIL (which also serializes them: a sink mutex could deadlock against it).
// During interpreter shutdown Python can no longer be called: drop them.
class PythonLogSink : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!Py_IsInitialized() || _Py_IsFinalizing()) return;
    std::string text(msg.payload.data(), msg.payload.size());
    py::gil_scoped_acquire gil;
    try {
      py::module_::import("logging").attr("getLogger")("fp4lm").attr("log")(python_level(msg.level), text);
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("fp4lm log sink");
    }
  }
  void flush_() override {}
};

}  // namespace

void install_python_log_sink() {
  auto& logger = fp4lm::log();
  logger.sinks().clear();
  logger.sinks().push_back(std::make_shared<PythonLogSink>());
}

}  // namespace fp4lm::python
