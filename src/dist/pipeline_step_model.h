#pragma once
// Rank 0's view of a pipeline as the engine's StepModel: its own stage (the first) runs in this
// process; each call is mirrored to the other ranks as a command (dist/protocol.h) and a
// forward's logits come back from the last stage. Forwards pipeline: submit() runs stage 0 and
// returns while the later stages work, so up to N (the number of stages) micro-batches are in
// flight; collect() takes the oldest one's logits. Every rank handles the commands in the order
// rank 0 sent them, so a release or rewind sent after a submit reaches each stage after that
// forward. Prefix caching is off (each stage keeps its own K/V); speculative decoding works
// (verify logits, the verify chunks' rewindable mark and rewinds are mirrored too), with
// recurrent stages as well: each stage cuts its own recurrent slots back by replaying the rows
// of the verify chunk it logged (model/state/sequence_state.h), as one process does.
#include <deque>
#include <exception>
#include <cstdint>
#include <map>
#include <vector>

#include "dist/heartbeat.h"
#include "dist/mpi_comm.h"
#include "dist/mpi_stage_link.h"
#include "engine/step_model.h"
#include "model/causal_lm.h"
#include "model/state/sequence_store.h"

namespace fp4lm::dist {

class PipelineStepModel final : public engine::StepModel {
 public:
  // What every stage's state allows speculative decoding, gathered at load (dist/pipeline.h).
  struct Rewind {
    bool can = true;              // every stage's recurrent slots can be cut back (StateLayout::can_rewind)
    size_t replay_row_bytes = 0;  // the largest stage's replay log bytes per verify row
  };
  // `lm`: stage 0.
  PipelineStepModel(MpiComm& comm, const model::CausalLM& lm, Rewind rewind);
  int64_t vocab_size() const override { return lm_.vocab_size(); }
  int64_t max_model_len() const override { return lm_.max_model_len(); }
  std::vector<int64_t> eos_ids() const override { return lm_.eos_ids(); }
  size_t bytes_for(int64_t capacity) const override;  // the largest stage's
  int64_t allocate(int64_t capacity) override;
  void release(int64_t seq) override;
  void forward(std::span<const engine::StepChunk> chunks) override;  // submit + collect, nothing in flight
  int64_t max_in_flight() const override { return comm_.size(); }
  void submit(std::span<const engine::StepChunk> chunks) override;
  void collect() override;
  bool can_rewind() const override { return rewind_.can; }
  void rewind(int64_t seq, int64_t length) override;
  // The largest stage's replay log for verify chunks of k + 1 rows (no MPI message: the engine's
  // scheduler asks it while it starts).
  size_t speculation_bytes(int64_t k) const override { return rewind_.replay_row_bytes * static_cast<size_t>(k + 1); }
  engine::PrefixSupport prefix_support(int64_t block_size) const override;
  void save_positions(int64_t seq, int64_t pos0, int64_t n, std::vector<uint8_t>& kv,
                      std::vector<uint8_t>* state) override;
  void load_positions(int64_t seq, std::span<const std::vector<uint8_t>* const> blocks, int64_t block_size,
                      const std::vector<uint8_t>* state) override;
  void shutdown();  // collects the forwards in flight, then tells every other rank to end (once)
  // Rank 0's waits end with the monitor's reason once it declares the pipeline lost.
  void set_monitor(const HeartbeatMonitor* m);

 private:
  void to_all(const std::vector<uint8_t>& cmd) const;
  void check_alive() const;  // Error with the reason once the pipeline is lost
  std::vector<uint8_t> wait(int src, int tag) const;

  MpiComm& comm_;
  const model::CausalLM& lm_;
  Rewind rewind_;
  model::SequenceStore store_;
  MpiStageLink link_;
  // [c - 1]: the bytes a sequence of capacity c reserves on the largest stage, for c up to
  // max_model_len; asked of every rank once, at construction, so that bytes_for (which the server
  // calls from its request threads to check a request) never sends an MPI message beside the
  // engine thread's.
  std::vector<size_t> bytes_for_;
  bool shut_ = false;
  // Submitted forwards not yet collected, oldest first: where their logits go, and rank 0's own
  // stage's error (thrown at collect, after the last stage's answer is taken).
  struct InFlight {
    std::vector<engine::StepChunk> chunks;
    std::exception_ptr own;
  };
  std::deque<InFlight> in_flight_;
  const HeartbeatMonitor* monitor_ = nullptr;
};

}  // namespace fp4lm::dist
