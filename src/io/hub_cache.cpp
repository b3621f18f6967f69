#include "io/hub_cache.h"

#include <cstdlib>
#include <fstream>
#include <system_error>
#include <unistd.h>

#include "core/error.h"

namespace fp4lm::io::hub {
namespace fs = std::filesystem;
namespace {

bool valid_name(const std::string& n) {
  if (n.empty() || n.size() > 96) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) return false;
  if (n.front() == '.' || n.front() == '-' || n.back() == '.' || n.back() == '-') return false;
  return n.find("--") == std::string::npos && n.find("..") == std::string::npos;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

fs::path home_cache() {
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty()) return x;
  return fs::path(env("HOME")) / ".cache";
}

// Writes `content` to `path` through a temporary file renamed over it.
void write_atomically(const fs::path& path, const std::string& content) {
  fs::create_directories(path.parent_path());
  const fs::path tmp = path.string() + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << content;
    if (!f.flush()) fail("{}: cannot write", tmp.string());
  }
  fs::rename(tmp, path);
}

}  // namespace

bool is_repo_id(const std::string& s) {
  const size_t slash = s.find('/');
  if (slash == std::string::npos || s.find('/', slash + 1) != std::string::npos) return false;
  return valid_name(s.substr(0, slash)) && valid_name(s.substr(slash + 1));
}

bool is_commit_hash(const std::string& s) {
  if (s.size() != 40) return false;
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

fs::path hf_home() {
  if (std::string h = env("HF_HOME"); !h.empty()) return h;
  return home_cache() / "huggingface";
}

fs::path cache_root(const std::string& download_dir) {
  if (!download_dir.empty()) return download_dir;
  if (std::string c = env("HF_HUB_CACHE"); !c.empty()) return c;
  if (std::string c = env("HUGGINGFACE_HUB_CACHE"); !c.empty()) return c;  // huggingface_hub's older name
  return hf_home() / "hub";
}

RepoCache::RepoCache(fs::path root, std::string repo_id) : root_(std::move(root)), repo_(std::move(repo_id)) {}

fs::path RepoCache::repo_dir() const {
  std::string folder = "models--" + repo_;
  for (size_t i = folder.find('/'); i != std::string::npos; i = folder.find('/', i)) folder.replace(i, 1, "--");
  return root_ / folder;
}

fs::path RepoCache::blob(const std::string& etag) const { return repo_dir() / "blobs" / etag; }
fs::path RepoCache::snapshot(const std::string& commit) const { return repo_dir() / "snapshots" / commit; }
fs::path RepoCache::lock_file(const std::string& etag) const {
  return root_ / ".locks" / repo_dir().filename() / (etag + ".lock");
}

std::optional<std::string> RepoCache::commit_of(const std::string& revision) const {
  if (is_commit_hash(revision)) {
    if (fs::is_directory(snapshot(revision))) return revision;
    return std::nullopt;
  }
  const fs::path ref = repo_dir() / "refs" / revision;
  std::ifstream f(ref, std::ios::binary);
  if (!f) return std::nullopt;
  std::string commit((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  while (!commit.empty() && (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' ')) commit.pop_back();
  if (!is_commit_hash(commit)) fail("{}: expected a 40-hex commit hash, found '{}'", ref.string(), commit);
  return commit;
}

void RepoCache::write_ref(const std::string& revision, const std::string& commit) const {
  if (revision == commit) return;
  const fs::path ref = repo_dir() / "refs" / revision;
  if (auto c = commit_of(revision); c && *c == commit) return;
  write_atomically(ref, commit);
}

void RepoCache::link(const std::string& commit, const std::string& file, const std::string& etag) const {
  const fs::path dst = snapshot(commit) / file;
  fs::create_directories(dst.parent_path());
  // Relative, as huggingface_hub makes it: up from snapshots/<commit>/<dirs of file>, into blobs/.
  fs::path target = "..";
  target /= "..";
  for (size_t i = file.find('/'); i != std::string::npos; i = file.find('/', i + 1)) target /= "..";
  target /= "blobs";
  target /= etag;
  const fs::path tmp = dst.string() + ".tmp" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove(tmp, ec);
  fs::create_symlink(target, tmp, ec);
  if (ec) {  // no symlinks here (some network or Windows filesystems): a copy, as huggingface_hub does
    fs::copy_file(blob(etag), tmp, fs::copy_options::overwrite_existing);
  }
  fs::rename(tmp, dst);
}

bool RepoCache::has_file(const std::string& commit, const std::string& file) const {
  std::error_code ec;
  return fs::exists(snapshot(commit) / file, ec);  // follows the symlink: false when the blob is gone
}

}  // namespace fp4lm::io::hub
