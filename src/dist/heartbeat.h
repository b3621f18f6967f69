#pragma once
// Liveness of a pipeline's ranks, so that a dead or hung rank makes rank 0 fail within a bounded
// time instead of waiting forever. Every rank > 0 sends rank 0 a small message every 200 ms from a
// thread of its own (so a stage busy with a long prefill still beats); rank 0's monitor thread
// reads them and declares the pipeline lost when a rank has been silent for `timeout`. Rank 0's
// waits (dist/pipeline_step_model.h) check lost() and fail with its reason.
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/mpi_comm.h"

namespace fp4lm::dist {

constexpr std::chrono::milliseconds kHeartbeatPeriod{200};

class HeartbeatSender {
 public:
  explicit HeartbeatSender(MpiComm& comm);
  ~HeartbeatSender();  // stops, then sends rank 0 the last beat ("bye")

 private:
  MpiComm& comm_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

class HeartbeatMonitor {
 public:
  // `hosts`: each rank's host (index = rank), for the messages. `on_lost` runs on the monitor
  // thread once, with the reason.
  HeartbeatMonitor(MpiComm& comm, std::vector<std::string> hosts, std::chrono::milliseconds timeout,
                   std::function<void(const std::string&)> on_lost);
  ~HeartbeatMonitor();
  void stop();  // stops watching
  // After the shutdown command: waits (5 s at most) for every rank's last beat, so no message is
  // left unread when MPI ends.
  void drain();

  // Non-empty once the pipeline is lost: why.
  std::string lost() const;
  // Declares it lost now (e.g. on SIGTERM from mpirun) when some rank has been silent for
  // `silence`; returns the reason, or "" when every rank beat within it.
  std::string declare_if_silent(std::chrono::milliseconds silence);

 private:
  void run();
  std::string silent_rank(std::chrono::milliseconds silence) const;  // "" when none
  void declare(const std::string& why);

  MpiComm& comm_;
  std::vector<std::string> hosts_;
  std::chrono::milliseconds timeout_;
  std::function<void(const std::string&)> on_lost_;
  std::vector<std::atomic<int64_t>> last_ns_;  // steady_clock of each rank's last beat
  std::vector<std::atomic<bool>> said_bye_;
  mutable std::mutex mu_;
  std::string lost_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace fp4lm::dist
