#pragma once
// Progress of parallel file downloads: on a terminal one bar per file, redrawn in place at most
// 10 times a second; otherwise one log line per finished file.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace fp4lm::io::hub {

class DownloadProgress {
 public:
  // `tty`: draw bars on stderr (isatty(2) by default).
  explicit DownloadProgress(std::string repo, int tty = -1);
  ~DownloadProgress();
  // A file begins, `already` of its `total` bytes on disk (a resumed download). Returns its id.
  int start(const std::string& file, uint64_t total, uint64_t already);
  void advance(int id, uint64_t bytes);
  void finish(int id);

 private:
  struct Row {
    std::string file;
    uint64_t total = 0, done = 0, resumed = 0;
    bool finished = false;
    std::chrono::steady_clock::time_point t0;
  };
  void draw(bool force);
  std::string repo_;
  bool tty_;
  std::mutex mu_;
  std::vector<Row> rows_;
  int lines_drawn_ = 0;
  std::chrono::steady_clock::time_point last_draw_{};
};

// "1.5 GiB", "12.0 MiB", "512 B".
std::string human_bytes(uint64_t n);

}  // namespace fp4lm::io::hub
