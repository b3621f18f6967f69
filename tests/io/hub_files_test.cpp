// Which files of a Hub repo a run downloads (io/hub_files.h), the digests files are checked
// against (io/file_digest.h) and the URL pieces of the Hub client (io/hub_http.h).
#include "io/hub_files.h"

#include <gtest/gtest.h>

#include "common/paths.h"
#include "core/error.h"
#include "io/file_digest.h"
#include "io/hub_http.h"

namespace fp4lm::io::hub::hub_files_test {
namespace {

using nlohmann::json;
using Files = std::vector<std::string>;

const Files kRepo = {"README.md", "config.json", "generation_config.json", "hf_quant_config.json",
                     "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                     "model.safetensors.index.json", "original/consolidated.00.pth", "original/params.json",
                     "pytorch_model.bin", "tiny.gguf", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja",
                     "preprocessor_config.json", "configuration_custom.py"};

TEST(HubFiles, BaseFilesAreConfigsTokenizerAndTheIndex) {
  EXPECT_EQ(base_files(kRepo, Need::model),
            (Files{"chat_template.jinja", "config.json", "generation_config.json", "hf_quant_config.json",
                   "model.safetensors.index.json", "preprocessor_config.json", "tokenizer.json",
                   "tokenizer_config.json"}));
  EXPECT_EQ(base_files(kRepo, Need::tokenizer_only),
            (Files{"chat_template.jinja", "tokenizer.json", "tokenizer_config.json"}));
  // The single file wins over an index, as the loader reads it.
  EXPECT_EQ(base_files({"config.json", "model.safetensors", "model.safetensors.index.json"}, Need::model),
            (Files{"config.json", "model.safetensors"}));
}

TEST(HubFiles, ShardsAreWhatTheIndexNames) {
  const json index = {{"weight_map",
                       {{"a", "model-00002-of-00002.safetensors"},
                        {"b", "model-00001-of-00002.safetensors"},
                        {"c", "model-00002-of-00002.safetensors"}}}};
  EXPECT_EQ(shard_files(index, kRepo, "idx"),
            (Files{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}));
  auto err = [](const json& j) {
    try {
      shard_files(j, kRepo, "idx");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(err({{"weight_map", {{"a", "gone.safetensors"}}}}),
            "idx: shard 'gone.safetensors' (for tensor 'a') is not in the repo");
  EXPECT_EQ(err({{"weight_map", {{"a", 3}}}}), "idx: weight_map['a'] is not a file name");
  EXPECT_EQ(err(json::array()), "idx: no 'weight_map' object");
}

TEST(HubFiles, IncludePatternsAsAllowPatterns) {
  EXPECT_EQ(matching_files(kRepo, {"*.gguf", "original/"}),
            (Files{"original/consolidated.00.pth", "original/params.json", "tiny.gguf"}));
  EXPECT_EQ(matching_files({"a.json", "sub/b.json", "c.txt"}, {"*.json"}), (Files{"a.json", "sub/b.json"}));
}

TEST(HubFiles, SnapshotCompleteness) {
  test::TempDir d;
  const std::string dir = d.path().string();
  EXPECT_EQ(missing_in_snapshot(dir, Need::model), "config.json");
  EXPECT_EQ(missing_in_snapshot(dir, Need::tokenizer_only), "tokenizer.json");
  test::write_file(d / "config.json", "{}");
  EXPECT_EQ(missing_in_snapshot(dir, Need::model), "model.safetensors");
  test::write_file(d / "model.safetensors.index.json", R"({"weight_map": {"a": "s1.safetensors"}})");
  EXPECT_EQ(missing_in_snapshot(dir, Need::model), "s1.safetensors");
  test::write_file(d / "s1.safetensors", "");
  EXPECT_EQ(missing_in_snapshot(dir, Need::model), "");
}

TEST(HubFiles, DigestsAsTheHubNamesFiles) {
  test::TempDir d;
  test::write_file(d / "empty", "");
  test::write_file(d / "hello", "hello\n");
  test::write_file(d / "abc", "abc");
  // `git hash-object` of the same bytes.
  EXPECT_EQ(git_blob_sha1_file((d / "empty").string()), "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391");
  EXPECT_EQ(git_blob_sha1_file((d / "hello").string()), "ce013625030ba8dba906f756967f9e9ca394464a");
  // FIPS 180-2's example.
  EXPECT_EQ(sha256_file((d / "abc").string()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(HubFiles, UrlOriginsAndEscapes) {
  EXPECT_EQ(url_origin("http://127.0.0.1:8080/api/x?y=1"), "http://127.0.0.1:8080");
  EXPECT_EQ(url_origin("https://HuggingFace.co/org/x/resolve/main/f"), "https://huggingface.co:443");
  EXPECT_NE(url_origin("https://huggingface.co/"), url_origin("https://cdn-lfs.huggingface.co/"));
  EXPECT_NE(url_origin("http://127.0.0.1:1/"), url_origin("http://127.0.0.1:2/"));
  EXPECT_EQ(url_escape("refs/pr/1", false), "refs%2Fpr%2F1");
  EXPECT_EQ(url_escape("sub dir/a+b.json", true), "sub%20dir/a%2Bb.json");
}

}  // namespace
}  // namespace fp4lm::io::hub::hub_files_test
