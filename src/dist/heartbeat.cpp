#include "dist/heartbeat.h"

#include <fmt/format.h>

#include "core/log.h"
#include "dist/protocol.h"

namespace fp4lm::dist {

namespace {
int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
}  // namespace

HeartbeatSender::HeartbeatSender(MpiComm& comm) : comm_(comm) {
  thread_ = std::thread([this] {
    const uint8_t beat = 0;
    while (!stop_) {
      try {
        comm_.send(0, kHeartbeat, std::span<const uint8_t>(&beat, 1));
      } catch (const std::exception& e) {
        log().warn("pipeline rank {}: heartbeat not sent: {}", comm_.rank(), e.what());
      }
      for (int i = 0; i < 4 && !stop_; ++i) std::this_thread::sleep_for(kHeartbeatPeriod / 4);
    }
  });
}

HeartbeatSender::~HeartbeatSender() {
  stop_ = true;
  thread_.join();
  const uint8_t bye = 1;
  try {
    comm_.send(0, kHeartbeat, std::span<const uint8_t>(&bye, 1));
  } catch (const std::exception&) {
  }
}

HeartbeatMonitor::HeartbeatMonitor(MpiComm& comm, std::vector<std::string> hosts, std::chrono::milliseconds timeout,
                                   std::function<void(const std::string&)> on_lost)
    : comm_(comm), hosts_(std::move(hosts)), timeout_(timeout), on_lost_(std::move(on_lost)),
      last_ns_(static_cast<size_t>(comm.size())), said_bye_(static_cast<size_t>(comm.size())) {
  for (auto& t : last_ns_) t = now_ns();
  thread_ = std::thread([this] { run(); });
}

HeartbeatMonitor::~HeartbeatMonitor() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void HeartbeatMonitor::run() {
  while (!stop_) {
    for (int r = 1; r < comm_.size(); ++r)
      try {
        // Every beat that arrived (a deadline in the past: probe only).
        while (auto m = comm_.recv_until(r, kHeartbeat, std::chrono::steady_clock::time_point::min())) {
          last_ns_[static_cast<size_t>(r)] = now_ns();
          if (!m->empty() && (*m)[0] == 1) said_bye_[static_cast<size_t>(r)] = true;
        }
      } catch (const std::exception& e) {
        declare(fmt::format("pipeline rank {} on {}: {}", r, hosts_[static_cast<size_t>(r)], e.what()));
      }
    if (const std::string s = silent_rank(timeout_); !s.empty()) declare(s);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

void HeartbeatMonitor::stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void HeartbeatMonitor::drain() {
  stop();
  if (!lost().empty()) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (int r = 1; r < comm_.size(); ++r)
    while (!said_bye_[static_cast<size_t>(r)]) {
      auto m = comm_.recv_until(r, kHeartbeat, deadline);
      if (!m) {
        log().warn("pipeline: rank {} on {} did not say goodbye within 5 s", r, hosts_[static_cast<size_t>(r)]);
        break;
      }
      if (!m->empty() && (*m)[0] == 1) said_bye_[static_cast<size_t>(r)] = true;
    }
}

std::string HeartbeatMonitor::silent_rank(std::chrono::milliseconds silence) const {
  const int64_t now = now_ns();
  for (int r = 1; r < comm_.size(); ++r) {
    const int64_t quiet = now - last_ns_[static_cast<size_t>(r)];
    if (!said_bye_[static_cast<size_t>(r)] && quiet > std::chrono::nanoseconds(silence).count())
      return fmt::format("pipeline rank {} on {} has sent no heartbeat for {:.1f} s (dead or hung)", r,
                         hosts_[static_cast<size_t>(r)], static_cast<double>(quiet) * 1e-9);
  }
  return "";
}

void HeartbeatMonitor::declare(const std::string& why) {
  {
    std::lock_guard lk(mu_);
    if (!lost_.empty()) return;
    lost_ = why;
  }
  log().error("{}", why);
  if (on_lost_) on_lost_(why);
}

std::string HeartbeatMonitor::lost() const {
  std::lock_guard lk(mu_);
  return lost_;
}

std::string HeartbeatMonitor::declare_if_silent(std::chrono::milliseconds silence) {
  const std::string s = silent_rank(silence);
  if (!s.empty()) declare(s);
  return lost();
}

}  // namespace fp4lm::dist
