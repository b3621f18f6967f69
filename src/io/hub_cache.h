#pragma once
// The Hugging Face Hub cache, laid out as huggingface_hub lays it out, so that either program
// reads what the other wrote (docs/HUB.md):
//   <root>/models--<org>--<name>/blobs/<etag>          the files' bytes, named by ETag (LFS: sha256)
//   <root>/models--<org>--<name>/snapshots/<commit>/F  relative symlinks to ../../blobs/<etag>
//   <root>/models--<org>--<name>/refs/<branch or tag>  the commit, without a newline
//   <root>/.locks/models--<org>--<name>/<etag>.lock     one downloader per blob
#include <filesystem>
#include <optional>
#include <string>

namespace fp4lm::io::hub {

// Whether `s` has the form of a model id, ORG/NAME: two names of [A-Za-z0-9._-], neither
// starting or ending with '.' or '-', without "--" or "..", at most 96 characters each.
bool is_repo_id(const std::string& s);
// Whether `s` is a 40-hex commit hash.
bool is_commit_hash(const std::string& s);

// The cache root: HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub, else
// ~/.cache/huggingface/hub. A non-empty `download_dir` (--download-dir) wins over all of them.
std::filesystem::path cache_root(const std::string& download_dir = "");
// $HF_HOME, else $XDG_CACHE_HOME/huggingface, else ~/.cache/huggingface.
std::filesystem::path hf_home();

class RepoCache {
 public:
  RepoCache(std::filesystem::path root, std::string repo_id);
  const std::filesystem::path& root() const { return root_; }
  const std::string& repo_id() const { return repo_; }
  std::filesystem::path repo_dir() const;
  std::filesystem::path blob(const std::string& etag) const;
  std::filesystem::path snapshot(const std::string& commit) const;
  std::filesystem::path lock_file(const std::string& etag) const;

  // The commit `revision` names here: a commit hash whose snapshot folder exists, or the
  // content of refs/<revision>; nullopt when the cache does not know it.
  std::optional<std::string> commit_of(const std::string& revision) const;
  // Writes refs/<revision> = commit (no newline), atomically; nothing when it already says so.
  void write_ref(const std::string& revision, const std::string& commit) const;
  // snapshots/<commit>/<file> -> the blob: a relative symlink, or a copy where the filesystem
  // has no symlinks. Replaces what was there.
  void link(const std::string& commit, const std::string& file, const std::string& etag) const;
  // Whether snapshots/<commit>/<file> exists and, when a symlink, its blob too.
  bool has_file(const std::string& commit, const std::string& file) const;

 private:
  std::filesystem::path root_;
  std::string repo_;
};

}  // namespace fp4lm::io::hub
