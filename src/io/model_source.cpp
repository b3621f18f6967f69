#include "io/model_source.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "io/hub_cache.h"
#include "io/hub_download.h"
#include "io/hub_http.h"
#include "io/hub_progress.h"
#include "io/json_file.h"

namespace fp4lm::io {
namespace fs = std::filesystem;
namespace {

std::string what_of(hub::Need need) { return need == hub::Need::model ? "model" : "tokenizer"; }

// The cached snapshot of `rev`, or an Error saying why it cannot be used (`why`: the reason
// no request was made or answered).
ModelSource from_cache(const hub::RepoCache& cache, ModelSource s, const ModelSourceOptions& o, const std::string& why) {
  const auto commit = cache.commit_of(s.revision);
  if (!commit)
    fail("{}: revision '{}' is not in the Hub cache {} and {}", s.repo_id, s.revision, cache.root().string(), why);
  s.commit = *commit;
  s.dir = cache.snapshot(*commit).string();
  if (o.include.empty())
    if (const std::string miss = hub::missing_in_snapshot(s.dir, o.need); !miss.empty())
      fail("{}: the cached snapshot {} lacks {} and {}", s.repo_id, s.dir, miss, why);
  return s;
}

}  // namespace

bool hub_offline() {
  const char* v = std::getenv("HF_HUB_OFFLINE");
  if (!v) return false;
  std::string s = v;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s == "1" || s == "true" || s == "yes" || s == "on";
}

namespace {

ModelSource resolve_hub(const std::string& model, const ModelSourceOptions& o) {
  ModelSource s;
  s.repo_id = model;
  s.revision = o.revision.empty() ? "main" : o.revision;
  const hub::RepoCache cache(hub::cache_root(o.download_dir), model);
  const std::string endpoint = hub::hub_endpoint();

  if (hub_offline()) {
    s = from_cache(cache, s, o, "HF_HUB_OFFLINE=1 forbids downloading it (offline)");
    s.origin = fmt::format("Hub cache {} ({} @ {}, offline: HF_HUB_OFFLINE=1, no request)", s.dir, model, s.commit);
    return s;
  }
  // A commit is immutable: a complete snapshot of it needs no request (as huggingface_hub).
  if (hub::is_commit_hash(s.revision) && o.include.empty() && fs::is_directory(cache.snapshot(s.revision)) &&
      hub::missing_in_snapshot(cache.snapshot(s.revision).string(), o.need).empty()) {
    s.commit = s.revision;
    s.dir = cache.snapshot(s.commit).string();
    s.origin = fmt::format("Hub cache {} ({} @ {}, a commit: no request)", s.dir, model, s.commit);
    return s;
  }

  const std::string token = hub::hub_token();
  hub::HubHttp http(endpoint, token);
  hub::RepoRevision rev;
  try {
    rev = hub::fetch_revision(http, model, s.revision);
  } catch (const hub::HubUnreachable& e) {
    s = from_cache(cache, s, o, fmt::format("the Hub is unreachable ({})", e.what()));
    log().warn("hub: {}: the Hub is unreachable ({}); using the cached snapshot {}", model, e.what(), s.commit);
    s.origin = fmt::format("Hub cache {} ({} @ {}, the Hub unreachable: not checked)", s.dir, model, s.commit);
    return s;
  }
  s.commit = rev.commit;
  s.dir = cache.snapshot(rev.commit).string();
  const std::vector<std::string> names = rev.names();
  std::vector<std::string> files = o.include.empty() ? hub::base_files(names, o.need) : hub::matching_files(names, o.include);
  if (files.empty())
    fail("{}: {} (revision {}) holds no {} files{}", model, endpoint, s.revision, what_of(o.need),
         o.include.empty() ? "" : " matching --include");
  if (o.include.empty() && o.need == hub::Need::model && !rev.find("config.json"))
    fail("{}: no config.json at revision {}: not a transformers model repo", model, s.revision);
  if (o.include.empty() && o.need == hub::Need::model && !rev.find("model.safetensors") &&
      !rev.find("model.safetensors.index.json")) {
    std::string other;  // what the repo has instead (*.bin, *.gguf, *.pth: formats fp4lm does not read)
    for (const std::string& n : names)
      if (n.ends_with(".bin") || n.ends_with(".gguf") || n.ends_with(".pth") || n.ends_with(".safetensors"))
        other += (other.empty() ? "" : ", ") + n;
    fail("{}: no model.safetensors or model.safetensors.index.json at revision {} (fp4lm reads safetensors "
         "checkpoints; the repo has {})",
         model, s.revision, other.empty() ? "no weights" : other);
  }
  hub::DownloadStats st = hub::download_files(cache, rev, files, endpoint, token);
  // The weights the index names, once the index is here.
  if (o.include.empty() && std::find(files.begin(), files.end(), "model.safetensors.index.json") != files.end()) {
    const std::string index = (fs::path(s.dir) / "model.safetensors.index.json").string();
    const auto shards = hub::shard_files(read_json_file(index), names, model + " model.safetensors.index.json");
    const hub::DownloadStats more = hub::download_files(cache, rev, shards, endpoint, token);
    st.files += more.files;
    st.bytes += more.bytes;
  }
  cache.write_ref(s.revision, rev.commit);
  s.downloaded_files = st.files;
  s.downloaded_bytes = st.bytes;
  s.origin = st.files == 0
                 ? fmt::format("Hub cache {} ({} @ {}, up to date with {}: nothing downloaded)", s.dir, model, s.commit,
                               endpoint)
                 : fmt::format("Hub cache {} ({} @ {}, {} files ({}) downloaded from {})", s.dir, model, s.commit,
                               st.files, hub::human_bytes(st.bytes), endpoint);
  return s;
}

}  // namespace

ModelSource resolve_model_source(const std::string& model, const ModelSourceOptions& o) {
  std::error_code ec;
  if (fs::exists(model, ec) || !hub::is_repo_id(model)) {
    if (!o.revision.empty() && fs::exists(model, ec))
      usage_fail("--revision {}: {} is a local directory, not a Hub id", o.revision, model);
    ModelSource s;
    s.dir = model;
    s.origin = fmt::format("directory {}", fs::absolute(model, ec).string());
    return s;
  }
  ModelSource s = resolve_hub(model, o);
  log().info("hub: {}", s.origin);
  return s;
}

}  // namespace fp4lm::io
