#pragma once
// Ctrl-C (SIGINT) and SIGTERM end the process as they always do, but first remove the paths
// registered here (a half-written output directory), as an error would. The signals are blocked
// in every thread and awaited by a thread of their own, where removing files is safe; a path is
// registered or released under the same lock, so none is created after the cleanup ran.
#include <cstdint>
#include <functional>
#include <string>

namespace fp4lm {

// Call once at the start of main, before any other thread exists (threads inherit the blocked
// signals). A signal the process ignored at start (nohup, `&` in a script) stays ignored.
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
