#include "io/staged_output_dir.h"

#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"

namespace fp4lm::io {

namespace fs = std::filesystem;

StagedOutputDir::StagedOutputDir(const fs::path& out, std::string name) : out_(out), name_(std::move(name)) {
  std::error_code ec;
  fs::create_directories(out_.parent_path(), ec);
  tmp_ = out_.parent_path() / fmt::format(".{}.fp4lm-tmp-{}", out_.filename().string(), ::getpid());
  fs::remove_all(tmp_, ec);
  on_interrupt_.emplace(tmp_.string(), [&] {
    if (!fs::create_directory(tmp_, ec) || ec) fail("{}: cannot create directory: {}", tmp_.string(), ec.message());
  });
}

StagedOutputDir::~StagedOutputDir() {
  if (published_) return;
  std::error_code ec;
  fs::remove_all(tmp_, ec);
}

void StagedOutputDir::publish() {
  std::error_code ec;
  if (fs::exists(out_, ec)) {
    const fs::path old = out_.parent_path() / fmt::format(".{}.fp4lm-old-{}", out_.filename().string(), ::getpid());
    fs::rename(out_, old, ec);
    if (ec) fail("{}: cannot move the existing directory aside: {}", name_, ec.message());
    fs::rename(tmp_, out_, ec);
    if (ec) {
      std::error_code ec2;
      fs::rename(old, out_, ec2);
      fail("{}: cannot rename {} into place: {}", name_, tmp_.string(), ec.message());
    }
    fs::remove_all(old, ec);
  } else {
    fs::rename(tmp_, out_, ec);
    if (ec) fail("{}: cannot rename {} into place: {}", name_, tmp_.string(), ec.message());
  }
  published_ = true;
}

}  // namespace fp4lm::io
