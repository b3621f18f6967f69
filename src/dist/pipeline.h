#pragma once
// Pipeline parallelism over MPI (`mpirun -np N fp4lm generate|serve ... --pipeline-parallel-size N`):
// every rank runs the same command line; rank 0 plans the stages (dist/stage_plan.h), checks that
// every rank holds the same model files for its stage, and each rank loads only its stage's
// layers. Rank 0 then drives the model through a StepModel (the engine, the HTTP server and the
// tokenizer live only there); the other ranks serve its commands until it shuts them down.
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dist/heartbeat.h"
#include "dist/mpi_comm.h"
#include "dist/pipeline_step_model.h"
#include "dist/stage_plan.h"
#include "engine/runtime.h"
#include "engine/step_model.h"
#include "model/causal_lm.h"

namespace fp4lm::dist {

class Pipeline {
 public:
  // MPI_Init; UsageError when the build lacks MPI or mpirun started another number of processes.
  // `heartbeat_timeout`: how long a silent rank may stay silent before rank 0 declares the
  // pipeline lost (dist/heartbeat.h).
  static std::unique_ptr<Pipeline> join(int size, std::chrono::milliseconds heartbeat_timeout);
  // Rank 0: tells the other ranks to end and MPI_Finalize; once the pipeline is lost, ends the
  // whole job instead (MPI_Abort, exit 1), since a lost rank cannot finalize.
  ~Pipeline();

  bool is_driver() const { return comm_->rank() == 0; }
  int rank() const { return comm_->rank(); }

  // Ranks > 0: loads this rank's stage and serves rank 0 until it ends the pipeline. Returns the
  // exit code (0); an error (bad files, a failed load) throws after rank 0 was told.
  int run_worker(const std::string& dir, const model::EngineOptions& opts, model::LoadOptions lo);
  // Rank 0: plans, checks and loads the stages (logging which layers, bytes and host each has)
  // and returns the model as the engine drives it (over this pipeline: it must outlive the Runtime).
  // Error when any rank failed (its host named).
  engine::Runtime load(const std::string& dir, const model::EngineOptions& opts, model::LoadOptions lo);
  const model::CausalLM& stage_model() const { return *lm_; }  // this rank's stage

  // Rank 0, before load(): what to do when the pipeline is lost (called once, on the monitor
  // thread, with the reason). Default: log it and end the job (exit 1).
  void on_lost(std::function<void(const std::string&)> f) { on_lost_ = std::move(f); }
  // Rank 0: "" while every rank beats; else why the pipeline is lost. With `silence` > 0, first
  // declares it lost when some rank has been silent that long (used on SIGTERM, which mpirun
  // sends to every rank about a second after one died).
  std::string lost(std::chrono::milliseconds silence = {}) const;
  [[noreturn]] void abort(int code) { comm_->abort(code); }

 private:
  explicit Pipeline(std::unique_ptr<MpiComm> comm);
  int work(const std::string& dir, const model::EngineOptions& opts, model::LoadOptions lo);
  // Every rank: loads stage `s` and agrees with the others on the row alignment (or fails).
  void load_stage(const std::shared_ptr<io::Checkpoint>& ckpt, const Stage& s, const model::EngineOptions& opts,
                  model::LoadOptions lo, const std::vector<Stage>& plan);

  std::unique_ptr<MpiComm> comm_;
  std::unique_ptr<model::CausalLM> lm_;
  std::unique_ptr<PipelineStepModel> driver_;
  std::unique_ptr<HeartbeatMonitor> monitor_;
  std::function<void(const std::string&)> on_lost_;
  std::chrono::milliseconds heartbeat_timeout_{10000};
  std::vector<std::string> hosts_;  // per rank
  bool has_recurrent_ = false;  // any stage
  PipelineStepModel::Rewind rewind_;  // rank 0: what every stage allows speculative decoding
  bool loading_ = false;        // rank 0 began load(): from there on every rank hears each outcome
};

}  // namespace fp4lm::dist
