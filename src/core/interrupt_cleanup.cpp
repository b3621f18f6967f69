#include "core/interrupt_cleanup.h"

#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

namespace fp4lm {

namespace {

// Never destroyed: the signal thread may use them while the process exits.
struct Registry {
  std::mutex mu;
  std::map<uint64_t, std::string> paths;
  uint64_t next_id = 0;
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

[[noreturn]] void wait_for_signal(sigset_t set) {
  int sig = 0;
  while (sigwait(&set, &sig) != 0) {
  }
  Registry& r = registry();
  r.mu.lock();  // held until the process ends: nothing registers a new path after this
  for (const auto& [id, path] : r.paths) {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  // End the way the signal would have ended us (the shell sees "killed by SIGINT").
  std::signal(sig, SIG_DFL);
  sigset_t one;
  sigemptyset(&one);
  sigaddset(&one, sig);
  pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
  std::raise(sig);
  _exit(128 + sig);
}

}  // namespace

void install_interrupt_cleanup() {
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGINT, SIGTERM}) {
      struct sigaction old {};
      if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      sigaddset(&set, sig);
    }
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::thread(wait_for_signal, set).detach();
  });
}

RemoveOnInterrupt::RemoveOnInterrupt(std::string path, const std::function<void()>& create) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  id_ = r.next_id++;
  r.paths.emplace(id_, std::move(path));
  if (create) {
    try {
      create();
    } catch (...) {
      r.paths.erase(id_);
      throw;
    }
  }
}

RemoveOnInterrupt::~RemoveOnInterrupt() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.paths.erase(id_);
}

}  // namespace fp4lm
