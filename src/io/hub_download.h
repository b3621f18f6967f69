#pragma once
// Downloads from the Hugging Face Hub into the shared cache (io/hub_cache.h): what a revision
// holds (the API's file list with sizes and hashes), and the files themselves: several at once,
// each resumed with a Range request into blobs/<etag>.incomplete after a cut, verified (sha256
// for LFS files, git's blob sha1 for the others) before it is renamed to its blob, one process
// per blob (a lock file as huggingface_hub's), then linked into the snapshot.
#include <cstdint>
#include <string>
#include <vector>

#include "io/hub_cache.h"
#include "io/hub_http.h"

namespace fp4lm::io::hub {

struct HubFile {
  std::string path;
  uint64_t size = 0;
  std::string blob_id;     // git blob sha1 (the ETag of a file kept in git)
  std::string lfs_sha256;  // "" unless an LFS file (then its ETag, X-Linked-Etag)
  const std::string& etag() const { return lfs_sha256.empty() ? blob_id : lfs_sha256; }
};

struct RepoRevision {
  std::string repo, revision, commit;
  std::vector<HubFile> files;
  std::vector<std::string> names() const;
  const HubFile* find(const std::string& path) const;
};

// GET api/models/{repo}/revision/{revision}?blobs=true (and the tree listing when the file list
// lacks sizes or hashes). Errors as check_response; HubUnreachable when the Hub is not reached.
RepoRevision fetch_revision(HubHttp& http, const std::string& repo, const std::string& revision);

// Throws the one-line Error a failed Hub response means: gated repo (naming HF_TOKEN), no such
// repo, no such revision, no such file; HubUnreachable for a 5xx. Nothing for a 2xx.
void check_response(const HttpResult& r, const HubHttp& http, const std::string& repo, const std::string& revision,
                    const std::string& file = "");

struct DownloadStats {
  int files = 0;       // downloaded now (not found in the cache)
  uint64_t bytes = 0;  // bytes received now
};

// Puts `files` of `rev` into snapshots/<commit>, downloading those whose blob is not cached, up to
// `workers` at once. Checks the free space first (Error: needed vs free).
DownloadStats download_files(const RepoCache& cache, const RepoRevision& rev, const std::vector<std::string>& files,
                             const std::string& endpoint, const std::string& token, int workers = 8);

}  // namespace fp4lm::io::hub
