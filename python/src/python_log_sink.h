#pragma once
// Routes the engine's log (core/log.h) to Python's `logging` module, logger "fp4lm", so Python
// users capture exactly the lines the CLI prints (without the CLI's level/time prefix, which
// Python's own formatter supplies).
namespace fp4lm::python {

// Replaces the engine logger's stderr sink with one that calls logging.getLogger("fp4lm").log().
void install_python_log_sink();

}  // namespace fp4lm::python
