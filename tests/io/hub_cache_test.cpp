// The Hub cache layout (io/hub_cache.h) as huggingface_hub lays it out: ids, the root from the
// environment, repo folders, relative symlinks, refs without a newline.
#include "io/hub_cache.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>

#include "common/paths.h"
#include "core/error.h"

namespace fp4lm::io::hub::hub_cache_test {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

// Sets (a null value: unsets) an environment variable for the object's lifetime, then restores it.
class ScopedEnv {
 public:
  ScopedEnv(std::string name, const char* value) : name_(std::move(name)) {
    if (const char* old = std::getenv(name_.c_str())) saved_ = old;
    value ? ::setenv(name_.c_str(), value, 1) : ::unsetenv(name_.c_str());
  }
  ~ScopedEnv() { saved_ ? ::setenv(name_.c_str(), saved_->c_str(), 1) : ::unsetenv(name_.c_str()); }

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

TEST(HubCache, RepoIds) {
  for (const char* id : {"nvidia/Qwen3.6-35B-A3B-NVFP4", "org/tiny", "a_b/c.d", "Org1/x"}) EXPECT_TRUE(is_repo_id(id)) << id;
  for (const char* id : {"/abs/path", "a/b/c", "org/", "/x", "./x", "../x", "a--b/c", "org/.x", "org/x-", "org/a..b",
                         "org", "org/x y", "org/x\\y"})
    EXPECT_FALSE(is_repo_id(id)) << id;
  EXPECT_TRUE(is_commit_hash(std::string(40, 'a')));
  EXPECT_FALSE(is_commit_hash(std::string(40, 'A')));
  EXPECT_FALSE(is_commit_hash(std::string(39, 'a')));
  EXPECT_FALSE(is_commit_hash("main"));
}

TEST(HubCache, RootFollowsHuggingFaceHubsRules) {
  ScopedEnv a("HF_HUB_CACHE", nullptr), b("HUGGINGFACE_HUB_CACHE", nullptr), c0("HF_HOME", nullptr),
      d("XDG_CACHE_HOME", nullptr), home("HOME", "/home/u");
  EXPECT_EQ(cache_root(), fs::path("/home/u/.cache/huggingface/hub"));
  {
    ScopedEnv e("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(cache_root(), fs::path("/xdg/huggingface/hub"));
    ScopedEnv h("HF_HOME", "/hf");
    EXPECT_EQ(cache_root(), fs::path("/hf/hub"));
    EXPECT_EQ(hf_home(), fs::path("/hf"));
    ScopedEnv c("HF_HUB_CACHE", "/cache");
    EXPECT_EQ(cache_root(), fs::path("/cache"));
    EXPECT_EQ(cache_root("/dl"), fs::path("/dl"));  // --download-dir wins
  }
}

TEST(HubCache, LinksAreRelativeSymlinksToBlobs) {
  TempDir d;
  RepoCache c(d.path(), "org/name");
  EXPECT_EQ(c.repo_dir(), d.path() / "models--org--name");
  EXPECT_EQ(c.lock_file("e1"), d.path() / ".locks" / "models--org--name" / "e1.lock");
  const std::string commit(40, 'c');
  fs::create_directories(c.repo_dir() / "blobs");
  test::write_file(c.blob("e1"), "one");
  test::write_file(c.blob("e2"), "two");
  c.link(commit, "config.json", "e1");
  c.link(commit, "sub/dir/f.json", "e2");
  EXPECT_EQ(fs::read_symlink(c.snapshot(commit) / "config.json"), fs::path("../../blobs/e1"));
  EXPECT_EQ(fs::read_symlink(c.snapshot(commit) / "sub/dir/f.json"), fs::path("../../../../blobs/e2"));
  EXPECT_EQ(test::read_file(c.snapshot(commit) / "sub/dir/f.json"), "two");
  c.link(commit, "config.json", "e2");  // replaced in place
  EXPECT_EQ(test::read_file(c.snapshot(commit) / "config.json"), "two");
  EXPECT_TRUE(c.has_file(commit, "config.json"));
  fs::remove(c.blob("e2"));
  EXPECT_FALSE(c.has_file(commit, "config.json"));  // a link to a missing blob is no file
}

TEST(HubCache, RefsHoldTheCommitWithoutNewline) {
  TempDir d;
  RepoCache c(d.path(), "org/name");
  const std::string commit(40, 'a');
  EXPECT_FALSE(c.commit_of("main"));
  c.write_ref("main", commit);
  EXPECT_EQ(test::read_file(c.repo_dir() / "refs" / "main"), commit);
  EXPECT_EQ(c.commit_of("main"), commit);
  c.write_ref("refs/pr/1", commit);  // a nested ref, as huggingface_hub writes it
  EXPECT_EQ(c.commit_of("refs/pr/1"), commit);
  test::write_file(c.repo_dir() / "refs" / "v1", commit + "\n");  // a newline from another writer is tolerated
  EXPECT_EQ(c.commit_of("v1"), commit);
  // A commit is known when its snapshot folder exists.
  EXPECT_FALSE(c.commit_of(commit));
  fs::create_directories(c.snapshot(commit));
  EXPECT_EQ(c.commit_of(commit), commit);
  test::write_file(c.repo_dir() / "refs" / "bad", "not a commit");
  try {
    c.commit_of("bad");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected a 40-hex commit hash, found 'not a commit'"), std::string::npos);
  }
}

}  // namespace
}  // namespace fp4lm::io::hub::hub_cache_test
