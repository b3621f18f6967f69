// `fp4lm download ORG/NAME [--revision R] [--include GLOB]...`: fetch a Hub model into the shared
// Hugging Face cache without running it (docs/HUB.md), then print the snapshot directory, as
// `hf download` does. By default the files a run needs; --include picks exactly the files
// matching its patterns instead.
#include <cstdio>
#include <string>
#include <vector>

#include "cli/command.h"
#include "core/error.h"
#include "io/hub_cache.h"
#include "io/model_source.h"

namespace fp4lm::cli {
namespace {

struct DownloadArgs {
  std::string repo;
  io::ModelSourceOptions o;
  bool tokenizer_only = false;
};

int run_download(DownloadArgs& a) {
  if (!io::hub::is_repo_id(a.repo)) usage_fail("'{}' is not a Hub model id (ORG/NAME)", a.repo);
  if (a.tokenizer_only) a.o.need = io::hub::Need::tokenizer_only;
  const io::ModelSource s = io::resolve_model_source(a.repo, a.o);
  std::printf("%s\n", s.dir.c_str());
  return 0;
}

CommandRegistration reg("download", "Download a Hugging Face Hub model into the shared Hub cache", [](CLI::App& sub) {
  auto a = std::make_shared<DownloadArgs>();
  sub.add_option("repo", a->repo, "The model id, ORG/NAME")->required();
  sub.add_option("--revision", a->o.revision, "Branch, tag or commit (default main)");
  sub.add_option("--include", a->o.include,
                 "Download exactly the files matching this shell pattern (repeatable; e.g. '*.json'); default: the "
                 "files a run needs");
  sub.add_option("--download-dir", a->o.download_dir,
                 "The cache directory (default $HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub)");
  sub.add_flag("--tokenizer-only", a->tokenizer_only, "Only the tokenizer and chat template files");
  return [a]() { return run_download(*a); };
});

}  // namespace
}  // namespace fp4lm::cli
