#pragma once
// Paths tests use: the repo root, the shared test data beside it, the built fp4lm binary,
// and a fresh temporary directory per test.
#include <filesystem>
#include <string>

namespace fp4lm::test {

inline std::filesystem::path source_dir() { return FP4LM_SOURCE_DIR; }
inline std::filesystem::path shared_dir() { return source_dir() / ".." / "shared"; }
inline std::string fp4lm_bin() { return FP4LM_BIN; }

// A directory removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// Runs a shell command; returns its exit code and captured stdout / stderr.
struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
CommandResult run_command(const std::string& cmd);
// run_command of the fp4lm executable with `args` (a shell-quoted argument string).
CommandResult run_fp4lm(const std::string& args);

std::string read_file(const std::filesystem::path& p);
void write_file(const std::filesystem::path& p, const std::string& content);

}  // namespace fp4lm::test

// Skips the current test (with a message) when ../shared/<rel> is absent.
#define FP4LM_REQUIRE_SHARED(rel)                                                  \
  do {                                                                             \
    if (!std::filesystem::exists(::fp4lm::test::shared_dir() / (rel)))             \
      GTEST_SKIP() << "shared test data absent: " << (::fp4lm::test::shared_dir() / (rel)); \
  } while (0)
