#include "io/hub_download.h"

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <filesystem>
#include <mutex>
#include <set>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <thread>
#include <unistd.h>
#include <utility>

#include "core/log.h"
#include "io/file_digest.h"
#include "io/hub_progress.h"
#include "io/json_file.h"

namespace fp4lm::io::hub {
namespace fs = std::filesystem;
namespace {

constexpr int kAttempts = 5;  // per file: the first request and up to 4 resumptions

uint64_t free_bytes(const fs::path& dir) {
  struct statvfs s {};
  if (::statvfs(dir.c_str(), &s) != 0) return UINT64_MAX;
  return static_cast<uint64_t>(s.f_bavail) * s.f_frsize;
}

uint64_t file_size_or_0(const fs::path& p) {
  std::error_code ec;
  const auto n = fs::file_size(p, ec);
  return ec ? 0 : n;
}

std::string api_url(const HubHttp& http, const std::string& repo, const std::string& what) {
  return http.endpoint() + "/api/models/" + repo + "/" + what;
}

HubFile file_of_json(const nlohmann::json& j, const char* path_key, const char* blob_key) {
  HubFile f;
  f.path = j.value(path_key, std::string());
  f.blob_id = j.value(blob_key, std::string());
  f.size = j.value("size", uint64_t{0});
  if (auto lfs = j.find("lfs"); lfs != j.end() && lfs->is_object()) {
    f.lfs_sha256 = lfs->value("sha256", lfs->value("oid", std::string()));
    f.size = lfs->value("size", f.size);
  }
  return f;
}

// The tree listing, following its pagination (Link: <url>; rel="next").
std::vector<HubFile> fetch_tree(HubHttp& http, const std::string& repo, const std::string& commit) {
  std::vector<HubFile> files;
  std::string url = api_url(http, repo, "tree/" + commit + "?recursive=true&expand=false");
  while (!url.empty()) {
    const HttpResult r = http.get(url);
    check_response(r, http, repo, commit);
    const nlohmann::json j = parse_json(r.body, url);
    if (!j.is_array()) fail("{}: expected a JSON array", url);
    for (const auto& e : j)
      if (e.is_object() && e.value("type", std::string()) == "file") files.push_back(file_of_json(e, "path", "oid"));
    url.clear();
    const std::string link = r.header("link");
    if (const size_t next = link.find("rel=\"next\""); next != std::string::npos) {
      const size_t open = link.rfind('<', next), close = link.find('>', open);
      if (open != std::string::npos && close != std::string::npos) url = link.substr(open + 1, close - open - 1);
    }
  }
  return files;
}

// Downloads one blob under its lock; returns the bytes received.
struct BlobJob {
  const RepoCache& cache;
  const RepoRevision& rev;
  const HubFile& file;
  HubHttp& http;
  DownloadProgress& progress;
  const std::atomic<bool>& stop;

  uint64_t run() {
    const std::string etag = file.etag();
    const fs::path blob = cache.blob(etag);
    if (fs::exists(blob)) return 0;
    const fs::path lock = cache.lock_file(etag);
    fs::create_directories(lock.parent_path());
    const int fd = ::open(lock.c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0644);
    if (fd < 0) fail("{}: cannot open: {}", lock.string(), std::strerror(errno));
    struct Unlock {
      int fd;
      ~Unlock() { ::close(fd); }
    } unlock{fd};
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      log().info("hub: {} {}: another process is downloading it; waiting for {}", rev.repo, file.path, lock.string());
      if (::flock(fd, LOCK_EX) != 0) fail("{}: cannot lock: {}", lock.string(), std::strerror(errno));
    }
    if (fs::exists(blob)) return 0;  // the other process finished it
    return fetch(blob);
  }

  uint64_t fetch(const fs::path& blob) {
    const fs::path inc = blob.string() + ".incomplete";
    uint64_t have = file_size_or_0(inc);
    if (have > file.size) {
      fs::remove(inc);
      have = 0;
    }
    const int id = progress.start(file.path, file.size, have);
    const std::string url = http.endpoint() + "/" + rev.repo + "/resolve/" + rev.commit + "/" + url_escape(file.path, true);
    uint64_t received = 0;
    for (int attempt = 1; have < file.size; ++attempt) {
      if (have > 0) log().debug("hub: {} {}: resuming at byte {}", rev.repo, file.path, have);
      FILE* out = std::fopen(inc.c_str(), have > 0 ? "ab" : "wb");
      if (!out) fail("{}: cannot open: {}", inc.string(), std::strerror(errno));
      std::string write_error;
      bool started = false;
      auto sink = [&](long status, const char* data, size_t n) {
        if (stop) return false;
        if (!std::exchange(started, true) && status == 200 && have > 0) {  // the server ignored the Range: start over
          if (std::fflush(out) != 0 || ::ftruncate(::fileno(out), 0) != 0 || std::fseek(out, 0, SEEK_SET) != 0) {
            write_error = std::strerror(errno);
            return false;
          }
          have = 0;
          progress.advance(id, 0);
        }
        if (std::fwrite(data, 1, n, out) != n) {
          write_error = errno == ENOSPC ? disk_full(inc) : fmt::format("{}: write error: {}", inc.string(), std::strerror(errno));
          return false;
        }
        have += n;
        received += n;
        progress.advance(id, n);
        return true;
      };
      std::string cut;
      try {
        const HttpResult r = http.get(url, have, sink);
        if (std::fclose(out) != 0 && write_error.empty())
          write_error = errno == ENOSPC ? disk_full(inc) : fmt::format("{}: write error: {}", inc.string(), std::strerror(errno));
        out = nullptr;
        if (!write_error.empty()) fail("{}", write_error);
        if (r.status == 416 && have == file.size) break;
        check_response(r, http, rev.repo, rev.commit, file.path);
        if (have < file.size) cut = fmt::format("{} of {} bytes", have, file.size);
      } catch (const TransferCut& e) {
        if (out) std::fclose(out);
        if (!write_error.empty()) fail("{}", write_error);
        if (stop) fail("{}: stopped", file.path);
        cut = e.what();
      } catch (const HubUnreachable& e) {
        if (out) std::fclose(out);
        cut = e.what();
      } catch (...) {
        if (out) std::fclose(out);
        if (!write_error.empty()) fail("{}", write_error);
        throw;
      }
      if (!cut.empty()) {
        if (attempt >= kAttempts)
          fail("{} {}: download failed after {} attempts ({}); run again to resume from byte {}", rev.repo, file.path,
               kAttempts, cut, file_size_or_0(inc));
        log().warn("hub: {} {}: connection cut ({}); resuming with a Range request from byte {}", rev.repo, file.path,
                   cut, file_size_or_0(inc));
        have = file_size_or_0(inc);
        std::this_thread::sleep_for(std::chrono::milliseconds(200 * attempt));
      }
    }
    if (file.size == 0 && !fs::exists(inc)) std::fclose(std::fopen(inc.c_str(), "wb"));
    verify(inc);
    fs::rename(inc, blob);
    progress.finish(id);
    return received;
  }

  std::string disk_full(const fs::path& inc) const {
    return fmt::format("{} {}: disk full writing {}: the file needs {} more, {} free", rev.repo, file.path, inc.string(),
                       human_bytes(file.size - std::min(file.size, file_size_or_0(inc))),
                       human_bytes(free_bytes(inc.parent_path())));
  }

  void verify(const fs::path& inc) const {
    const uint64_t got = file_size_or_0(inc);
    std::string kind, want, have;
    if (got != file.size) {
      kind = "size", want = std::to_string(file.size), have = std::to_string(got);
    } else if (!file.lfs_sha256.empty()) {
      kind = "sha256", want = file.lfs_sha256, have = sha256_file(inc.string());
    } else {
      kind = "git blob sha1", want = file.blob_id, have = git_blob_sha1_file(inc.string());
    }
    if (want == have) return;
    std::error_code ec;
    fs::remove(inc, ec);  // nothing left that a later run could take for the file
    fail("{} {}: checksum mismatch: {} expected {}, got {}; the download was discarded", rev.repo, file.path, kind,
         want, have);
  }
};

}  // namespace

std::vector<std::string> RepoRevision::names() const {
  std::vector<std::string> n;
  for (const auto& f : files) n.push_back(f.path);
  return n;
}

const HubFile* RepoRevision::find(const std::string& path) const {
  for (const auto& f : files)
    if (f.path == path) return &f;
  return nullptr;
}

void check_response(const HttpResult& r, const HubHttp& http, const std::string& repo, const std::string& revision,
                    const std::string& file) {
  if (r.status >= 200 && r.status < 300) return;
  const std::string code = r.header("x-error-code"), ep = http.endpoint();
  if (code == "GatedRepo") {
    if (http.has_token())
      fail("{} is a gated repo and the token (HF_TOKEN) has no access to it: accept its conditions at {}/{}", repo, ep,
           repo);
    fail("{} is a gated repo: accept its conditions at {}/{} and set HF_TOKEN to a token with access (or write it to "
         "$HF_HOME/token)",
         repo, ep, repo);
  }
  if (code == "RevisionNotFound") fail("{}: no revision '{}' at {}", repo, revision, ep);
  if (code == "RepoNotFound" || (file.empty() && (r.status == 401 || r.status == 404)))
    fail("{}: no such model repo at {}{}", repo, ep,
         http.has_token() ? " (or the token has no access to it)" : " (or it is private: set HF_TOKEN)");
  if (code == "EntryNotFound" || r.status == 404) fail("{}: no file '{}' at revision {}", repo, file, revision);
  if (r.status >= 500) throw HubUnreachable(fmt::format("{}: HTTP {}", ep, r.status));
  const std::string msg = r.header("x-error-message");
  fail("{}: HTTP {}{}", r.url, r.status, msg.empty() ? "" : ": " + msg);
}

RepoRevision fetch_revision(HubHttp& http, const std::string& repo, const std::string& revision) {
  const std::string url = api_url(http, repo, "revision/" + url_escape(revision, false) + "?blobs=true");
  const HttpResult r = http.get(url);
  check_response(r, http, repo, revision);
  const nlohmann::json j = parse_json(r.body, url);
  RepoRevision rev;
  rev.repo = repo;
  rev.revision = revision;
  rev.commit = j.is_object() ? j.value("sha", std::string()) : std::string();
  if (!is_commit_hash(rev.commit)) fail("{}: no 40-hex 'sha' in the answer", url);
  bool complete = j.contains("siblings") && j["siblings"].is_array();
  if (complete)
    for (const auto& s : j["siblings"]) {
      HubFile f = file_of_json(s, "rfilename", "blobId");
      if (f.path.empty() || f.blob_id.empty() || !s.contains("size")) complete = false;
      rev.files.push_back(std::move(f));
    }
  if (!complete) rev.files = fetch_tree(http, repo, rev.commit);  // a Hub that leaves hashes out of the list
  for (const auto& f : rev.files)
    if (f.path.empty() || f.etag().empty() || f.etag().find('/') != std::string::npos)
      fail("{}: file entry '{}' without a usable hash", url, f.path);
  return rev;
}

DownloadStats download_files(const RepoCache& cache, const RepoRevision& rev, const std::vector<std::string>& files,
                             const std::string& endpoint, const std::string& token, int workers) {
  std::vector<const HubFile*> wanted, todo;  // todo: one file per blob (files with equal bytes share one)
  std::set<std::string> etags;
  uint64_t need = 0;
  for (const std::string& name : files) {
    const HubFile* f = rev.find(name);
    if (!f) fail("{}: no file '{}' at revision {}", rev.repo, name, rev.revision);
    if (cache.has_file(rev.commit, name)) continue;
    wanted.push_back(f);
    if (!etags.insert(f->etag()).second) continue;
    todo.push_back(f);
    const fs::path blob = cache.blob(f->etag());
    if (!fs::exists(blob)) need += f->size - std::min(f->size, file_size_or_0(blob.string() + ".incomplete"));
  }
  DownloadStats stats;
  if (wanted.empty()) return stats;
  const fs::path blobs = cache.repo_dir() / "blobs";
  fs::create_directories(blobs);
  if (const uint64_t free = free_bytes(blobs); need > free)
    fail("{}: not enough disk space in {}: the download needs {}, {} free", rev.repo, blobs.string(), human_bytes(need),
         human_bytes(free));

  DownloadProgress progress(rev.repo);
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> bytes{0};
  std::atomic<int> fetched{0};
  std::exception_ptr first_error;
  std::mutex err_mu;
  auto worker = [&] {
    try {
      HubHttp http(endpoint, token);
      for (size_t i; !stop && (i = next++) < todo.size();) {
        const HubFile& f = *todo[i];
        const uint64_t n = BlobJob{cache, rev, f, http, progress, stop}.run();
        if (n > 0 || f.size == 0) ++fetched;
        bytes += n;
      }
    } catch (...) {
      std::lock_guard<std::mutex> lk(err_mu);
      if (!first_error) first_error = std::current_exception();
      stop = true;
    }
  };
  const int n = std::max(1, std::min<int>(workers, static_cast<int>(todo.size())));
  std::vector<std::thread> threads;
  for (int i = 1; i < n; ++i) threads.emplace_back(worker);
  worker();
  for (auto& t : threads) t.join();
  if (first_error) std::rethrow_exception(first_error);
  for (const HubFile* f : wanted) cache.link(rev.commit, f->path, f->etag());  // every blob is published now
  stats.files = fetched;
  stats.bytes = bytes;
  return stats;
}

}  // namespace fp4lm::io::hub
