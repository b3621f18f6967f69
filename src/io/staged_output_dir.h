#pragma once
// An output directory written whole or not at all (`fp4lm quantize`, `fp4lm convert`): the files
// go into `.<name>.fp4lm-tmp-<pid>` beside OUT, which is removed on an error, SIGINT or SIGTERM
// (core/interrupt_cleanup.h), and renamed to OUT only when everything is written. A reader of OUT
// never sees a half-written checkpoint, and a failed run leaves an existing OUT as it was.
#include <filesystem>
#include <optional>
#include <string>

#include "core/interrupt_cleanup.h"

namespace fp4lm::io {

class StagedOutputDir {
 public:
  // Creates OUT's parent directories and the temporary directory (a stale one of the same pid is
  // removed first). `name` is OUT as the user wrote it, for messages.
  StagedOutputDir(const std::filesystem::path& out, std::string name);
  ~StagedOutputDir();  // removes the temporary directory unless published
  StagedOutputDir(const StagedOutputDir&) = delete;
  StagedOutputDir& operator=(const StagedOutputDir&) = delete;

  const std::filesystem::path& path() const { return tmp_; }  // where to write

  // The temporary directory becomes OUT. An existing OUT is moved aside first and removed only
  // once the new one is in place (put back when the rename fails).
  void publish();

 private:
  std::filesystem::path out_, tmp_;
  std::string name_;
  bool published_ = false;
  std::optional<RemoveOnInterrupt> on_interrupt_;
};

}  // namespace fp4lm::io
