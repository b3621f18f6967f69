#include "core/interrupt_cleanup.h"

#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

namespace fp4lm {

namespace {

// Never destroyed: the cleanup thread may use them while the process exits.
struct Registry {
  std::mutex mu;
  std::map<uint64_t, std::string> paths;
  uint64_t next_id = 0;
};
Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

int g_pipe[2] = {-1, -1};

// Any thread may take the signal (libraries start threads of their own): the handler only writes
// the signal number to a pipe, which is async-signal-safe.
void on_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_pipe[1], &b, 1);
}

[[noreturn]] void cleanup_on_signal() {
  unsigned char b = 0;
  while (::read(g_pipe[0], &b, 1) != 1) {
  }
  const int sig = b;
  Registry& r = registry();
  r.mu.lock();  // held until the process ends: nothing registers a new path after this
  for (const auto& [id, path] : r.paths) {
    // The other threads keep running meanwhile: a file created between remove_all's listing and
    // its rmdir leaves the directory behind (seen under load). Once the directory itself is
    // gone nothing can be created in it, so a few rounds always finish.
    for (int round = 0; round < 100; ++round) {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
      if (!std::filesystem::exists(path, ec)) break;
    }
  }
  // End the way the signal would have ended us (the shell sees "killed by SIGINT").
  std::signal(sig, SIG_DFL);
  std::raise(sig);
  _exit(128 + sig);
}

}  // namespace

void install_interrupt_cleanup() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (::pipe(g_pipe) != 0) return;  // no cleanup on signals, as before
    for (int sig : {SIGINT, SIGTERM}) {
      struct sigaction old {};
      if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C ends the process at once
      sigaction(sig, &sa, nullptr);
    }
    std::thread(cleanup_on_signal).detach();
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
