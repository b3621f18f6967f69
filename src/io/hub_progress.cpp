#include "io/hub_progress.h"

#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include <fmt/format.h>

#include "core/log.h"

namespace fp4lm::io::hub {

std::string human_bytes(uint64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 5) v /= 1024, ++u;
  return u == 0 ? fmt::format("{} B", n) : fmt::format("{:.1f} {}", v, units[u]);
}

DownloadProgress::DownloadProgress(std::string repo, int tty)
    : repo_(std::move(repo)),
      // huggingface_hub's switch for its bars is honoured too.
      tty_(tty < 0 ? ::isatty(2) == 1 && !std::getenv("HF_HUB_DISABLE_PROGRESS_BARS") : tty > 0) {}

DownloadProgress::~DownloadProgress() {
  std::lock_guard<std::mutex> lk(mu_);
  if (tty_ && !rows_.empty()) draw(true);
}

int DownloadProgress::start(const std::string& file, uint64_t total, uint64_t already) {
  std::lock_guard<std::mutex> lk(mu_);
  rows_.push_back({file, total, already, already, false, std::chrono::steady_clock::now()});
  if (tty_) draw(true);
  return static_cast<int>(rows_.size()) - 1;
}

void DownloadProgress::advance(int id, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  rows_[id].done += bytes;
  if (tty_) draw(false);
}

void DownloadProgress::finish(int id) {
  std::lock_guard<std::mutex> lk(mu_);
  Row& r = rows_[id];
  r.finished = true;
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - r.t0).count();
  if (tty_) {
    draw(true);
  } else {
    log().info("hub: {} {}: {}{} in {:.1f} s", repo_, r.file, human_bytes(r.total),
               r.resumed ? fmt::format(" (resumed at {})", human_bytes(r.resumed)) : std::string(), s);
  }
}

void DownloadProgress::draw(bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  std::string out;
  if (lines_drawn_ > 0) out += fmt::format("\x1b[{}A", lines_drawn_);
  for (const Row& r : rows_) {
    const double frac = r.total ? static_cast<double>(r.done) / static_cast<double>(r.total) : 1.0;
    const int width = 30, fill = static_cast<int>(frac * width);
    std::string name = r.file.size() > 40 ? "..." + r.file.substr(r.file.size() - 37) : r.file;
    out += fmt::format("\r\x1b[2K{:<40} [{}{}] {:3.0f}% {} / {}{}\n", name, std::string(fill, '#'),
                       std::string(width - fill, '.'), 100 * frac, human_bytes(r.done), human_bytes(r.total),
                       r.finished ? " done" : "");
  }
  lines_drawn_ = static_cast<int>(rows_.size());
  std::fwrite(out.data(), 1, out.size(), stderr);
  std::fflush(stderr);
}

}  // namespace fp4lm::io::hub
