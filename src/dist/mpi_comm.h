#pragma once
// This process's place in an MPI job (MPI_COMM_WORLD), the one file that includes mpi.h: blocking
// sends, polling receives that sleep while idle (so waiting ranks leave the cores to the ones that
// compute, and a wait can end on a deadline), and the job's abort. MPI is an optional part of the
// build (CMake's FindMPI); without it init() says so and nothing else can be reached.
#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace fp4lm::dist {

// Whether this build has MPI (FP4LM_HAVE_MPI).
bool mpi_built();

class MpiComm {
 public:
  // MPI_Init_thread with MPI_THREAD_MULTIPLE (the server's engine thread runs the model, a
  // heartbeat thread beats beside it).
  // UsageError when the build lacks MPI.
  static std::unique_ptr<MpiComm> init();
  ~MpiComm();  // MPI_Finalize
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const std::string& host() const { return host_; }  // MPI_Get_processor_name

  // Returns once the message is on its way (a large one: once the receiver takes it). While it
  // waits, a non-empty `abandon()` ends the wait with Error(that reason): a peer that will never
  // receive (a hung rank) cannot hold the sender.
  void send(int dest, int tag, std::span<const uint8_t> bytes, const std::function<std::string()>& abandon = {});
  // Starts sending `bytes` and returns at once; the message keeps them until the receiver takes
  // it. For a rank that must never wait on its receiver (the last stage answering rank 0 while
  // rank 0 sends it the next micro-batch). Each call also lets go of the messages already taken.
  void post(int dest, int tag, std::vector<uint8_t> bytes);
  void flush_posted();  // waits until every posted message was taken
  // The next message from `src` with `tag`; std::nullopt when none arrived by `deadline`.
  std::optional<std::vector<uint8_t>> recv_until(int src, int tag, std::chrono::steady_clock::time_point deadline);
  std::vector<uint8_t> recv(int src, int tag);  // waits as long as it takes
  // Ends every process of the job (MPI_Abort): for a rank that cannot go on alone.
  [[noreturn]] void abort(int code);

 private:
  MpiComm();
  struct Posted;  // a posted message: its bytes and request
  void reap();    // lets go of the posted messages already taken
  int rank_ = 0, size_ = 1;
  std::string host_;
  std::vector<std::unique_ptr<Posted>> posted_;
};

}  // namespace fp4lm::dist
