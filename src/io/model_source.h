#pragma once
// Where a model's files come from (docs/HUB.md): the one resolver every front end calls with
// what the user named (`--model`, `--tokenizer`, LLM(model=...)). A path that exists is a
// directory, as it always was. Otherwise ORG/NAME is a Hugging Face Hub id: its snapshot in the
// shared Hub cache (io/hub_cache.h), after a revision check that downloads what is missing
// (io/hub_download.h); with HF_HUB_OFFLINE=1 the cache alone, without a request; when the Hub is
// unreachable the cache, with a warning.
#include <cstdint>
#include <string>
#include <vector>

#include "io/hub_files.h"

namespace fp4lm::io {

struct ModelSourceOptions {
  std::string revision;               // branch, tag or commit; "" = main
  std::string download_dir;           // the cache root (--download-dir); "" = the HF_* rules
  std::vector<std::string> include;   // shell patterns: exactly these files (fp4lm download --include)
  hub::Need need = hub::Need::model;  // tokenizer_only for --tokenizer
};

struct ModelSource {
  std::string dir;       // the directory to load from
  std::string repo_id;   // "" for a directory
  std::string revision;  // as asked ("main" by default)
  std::string commit;    // the snapshot's commit
  std::string origin;    // one line: where the files came from (inspect prints it)
  int downloaded_files = 0;
  uint64_t downloaded_bytes = 0;
  bool is_hub() const { return !repo_id.empty(); }
};

// Whether HF_HUB_OFFLINE is set to 1/true/yes/on.
bool hub_offline();

// Resolves `model`; Error (one line, naming the repo) when a Hub id cannot be had. A name that
// neither exists nor has the form ORG/NAME comes back as a directory, for the loader's errors.
ModelSource resolve_model_source(const std::string& model, const ModelSourceOptions& o = {});

}  // namespace fp4lm::io
