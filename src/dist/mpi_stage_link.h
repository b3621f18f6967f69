#pragma once
// model::StageLink over MPI: a stage receives each forward step's residual stream from the rank
// before it and sends its own to the rank after it (dist/protocol.h, tag kHidden). A forward's
// stream ends with kEnd, or kFail with the error: finish() sends that end and reads the stream
// before up to its end, so a failed forward leaves no message behind for the next one.
#include <functional>
#include <string>

#include "core/error.h"

#include "dist/mpi_comm.h"
#include "model/causal_lm.h"

namespace fp4lm::dist {

// An error another stage reported (receive() throws it; its text names that stage).
class RemoteStageError : public Error {
 public:
  using Error::Error;
};

class MpiStageLink final : public model::StageLink {
 public:
  // prev / next: the neighbouring ranks (-1: none, the first / last stage).
  MpiStageLink(MpiComm& comm, int prev, int next) : comm_(comm), prev_(prev), next_(next) {}
  void receive(float* h, int64_t rows, int64_t hidden, std::vector<uint8_t>& extra) override;
  void send(const float* h, int64_t rows, int64_t hidden, std::span<const uint8_t> extra) override;
  // After a forward, ok or failed (`error` non-empty): ends the stream to the next stage with
  // kEnd or kFail(error), then reads the stream from the stage before to its end. Returns the
  // forward's error: `error`, else one that came from before (or "").
  std::string finish(const std::string& error);
  // Rank 0: sends give up with this reason once it is non-empty (the pipeline is lost).
  void set_abandon(std::function<std::string()> f) { abandon_ = std::move(f); }

 private:
  MpiComm& comm_;
  int prev_, next_;
  bool prev_ended_ = false;
  std::string prev_error_;
  std::function<std::string()> abandon_;
};

}  // namespace fp4lm::dist
