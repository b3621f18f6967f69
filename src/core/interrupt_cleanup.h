#pragma once
// Ctrl-C (SIGINT) and SIGTERM end the process as they always do, but first remove the paths
// registered here (a half-written output directory), as an error would. The handler only writes
// the signal to a pipe; a thread of its own removes the paths (where that is safe) and re-raises
// the signal with its default action. A path is registered or released under the lock that
// cleanup holds, so none is created after the cleanup ran.
#include <cstdint>
#include <functional>
#include <string>

namespace fp4lm {

// Installs the SIGINT/SIGTERM handlers (once; a later handler, e.g. `serve`'s, replaces them).
// A signal the process ignored at start (nohup, `&` in a script) stays ignored.
void install_interrupt_cleanup();

// Registers `path` for removal on SIGINT/SIGTERM for as long as this object lives. `create`
// (which makes the path) runs under the registry's lock, so a signal cannot fall between
// creating the path and registering it.
class RemoveOnInterrupt {
 public:
  explicit RemoveOnInterrupt(std::string path, const std::function<void()>& create = {});
  ~RemoveOnInterrupt();
  RemoveOnInterrupt(const RemoveOnInterrupt&) = delete;
  RemoveOnInterrupt& operator=(const RemoveOnInterrupt&) = delete;

 private:
  uint64_t id_;
};

}  // namespace fp4lm
