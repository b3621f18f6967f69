#include "common/paths.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include "core/log.h"

namespace fp4lm::test {

namespace {
// In-process tests log at warn unless FP4LM_LOG_LEVEL says otherwise: the INFO lines of hundreds
// of model loads would bury failures in ctest's output. CLI tests run the binary, which keeps
// its own INFO lines (some tests assert on them).
[[maybe_unused]] const bool kQuietLogs = [] {
  if (!std::getenv("FP4LM_LOG_LEVEL")) set_log_level("warn");
  return true;
}();
}  // namespace

TempDir::TempDir() {
  static std::atomic<int> counter{0};
  std::random_device rd;
  path_ = std::filesystem::temp_directory_path() /
          ("fp4lm-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
           std::to_string(rd()));
  std::filesystem::create_directories(path_);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + p.string());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_file(const std::filesystem::path& p, const std::string& content) {
  std::ofstream out(p, std::ios::binary);
  out << content;
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

CommandResult run_fp4lm(const std::string& args) {
  std::string cmd = fp4lm_bin();  // appended, not operator+: GCC 12 -O3 warns falsely (-Warray-bounds) on that
  cmd += ' ';
  cmd += args;
  return run_command(cmd);
}

CommandResult run_command(const std::string& cmd) {
  TempDir tmp;
  auto out = tmp / "out", err = tmp / "err";
  std::string full = cmd + " >" + out.string() + " 2>" + err.string() + " </dev/null";
  int status = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_file(out);
  r.err = read_file(err);
  return r;
}

}  // namespace fp4lm::test
