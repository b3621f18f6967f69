#pragma once
// The engine flags shared by every subcommand that loads a model: CLI spellings of
// engine::EngineArgs (engine/engine_args.h resolves them, for the Python LLM too).
#include <chrono>
#include <memory>

#include <CLI/CLI.hpp>

#include "engine/engine_args.h"
#include "engine/runtime.h"
#include "io/model_source.h"
#include "model/engine_options.h"

namespace fp4lm::dist {
class Pipeline;
}

namespace fp4lm::cli {

struct EngineFlags {
  engine::EngineArgs args;  // args.pipeline_parallel_size: --pipeline-parallel-size (generate, serve, eval)
  double pipeline_heartbeat_timeout = 10;  // seconds; --pipeline-heartbeat-timeout

  // engine::create_engine_config() with its errors in flag spelling (UsageError -> exit 2); sets
  // the global thread pool size when --threads is given.
  engine::EngineConfig config() const;
};

// The model a subcommand runs: every engine flag checked at construction; under mpirun
// (--pipeline-parallel-size > 1) join() makes this rank a pipeline's; open() is
// engine::Runtime::open through the pipeline (its driver) or of the whole model.
class ModelRun {
 public:
  explicit ModelRun(const EngineFlags& flags);
  ~ModelRun();
  void join();
  const engine::EngineConfig& config() const { return cfg_; }
  dist::Pipeline* pipeline() const { return pipeline_.get(); }
  // This rank runs a later stage: the subcommand returns run_worker(dir) and does nothing else.
  bool is_worker() const;
  int run_worker(const std::string& dir) const;
  engine::Runtime open(const std::string& dir) const;

 private:
  engine::EngineConfig cfg_;
  std::chrono::milliseconds heartbeat_{0};
  std::unique_ptr<dist::Pipeline> pipeline_;
};

// Where the model comes from: --model (a directory or a Hugging Face Hub id, ORG/NAME),
// --revision, --download-dir and, where a tokenizer is read, --tokenizer (io/model_source.h).
struct ModelFlags {
  std::string revision, download_dir, tokenizer;
  std::string positional;     // `fp4lm serve MODEL`, as `vllm serve MODEL` (with positional flags)
  std::string named;          // --model as given (after resolve)
  io::ModelSource source;     // after resolve
  std::string tokenizer_dir;  // after resolve: --tokenizer's directory, else the model's

  // Resolves `model` (the --model value) in place, once: it becomes the directory to load.
  void resolve(std::string& model, io::hub::Need need = io::hub::Need::model);
};

// --model (required; `help` says what it is), --revision, --download-dir, and --tokenizer when
// `with_tokenizer`; with `positional`, the model may also come first without --model (vLLM's
// `serve MODEL`).
void add_model_flags(CLI::App& sub, std::string& model, ModelFlags& flags, const std::string& help,
                     bool with_tokenizer = false, bool positional = false);

// `with_dtype`: whether --dtype applies (inspect has no use for it).
void add_engine_flags(CLI::App& sub, EngineFlags& flags, bool with_dtype = true);

// --pipeline-parallel-size and --pipeline-heartbeat-timeout, for the subcommands that run a
// pipeline under mpirun.
void add_pipeline_flag(CLI::App& sub, EngineFlags& flags);
// The heartbeat timeout as a duration (UsageError when not in (0, 3600] seconds).
std::chrono::milliseconds pipeline_heartbeat_timeout(const EngineFlags& flags);

// Runs `fn`, turning an engine::RequestError into a UsageError in flag spelling.
template <typename Fn>
auto with_flag_errors(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const engine::RequestError& e) {
    throw UsageError(engine::with_flag_spelling(e));
  }
}

}  // namespace fp4lm::cli
