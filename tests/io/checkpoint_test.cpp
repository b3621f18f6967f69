// Checkpoint: HF directories with one file or an index of shards, optional configs, and the
// broken directories (missing shard, tensor in two shards, bad config.json, ...).
#include "io/checkpoint.h"

#include <gtest/gtest.h>

#include <functional>

#include "common/paths.h"
#include "core/error.h"
#include "io/raw_safetensors.h"

namespace fp4lm::io::checkpoint_test {
namespace {

using nlohmann::json;
using test::TempDir;

const json kConfig = {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 16}};

std::string p(const TempDir& d, const std::string& name) { return (d / name).string(); }

void write_json(const TempDir& d, const std::string& name, const json& j) {
  test::write_file(d / name, j.dump(2));
}

// A shard holding F32 tensors of `n` elements each, value = index of the tensor + 1.
void write_shard(const TempDir& d, const std::string& name, const std::vector<std::string>& tensors,
                 int64_t n = 4) {
  SafetensorsWriter w;
  float v = 1;
  for (const auto& t : tensors) w.add(t, DType::F32, {n}, std::vector<float>(n, v++));
  w.write(p(d, name));
}

void write_index(const TempDir& d, const json& weight_map) {
  write_json(d, "model.safetensors.index.json",
             {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}});
}

std::string open_error(const TempDir& d) {
  try {
    Checkpoint::open(d.path().string());
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_HAS(msg, sub) EXPECT_NE((msg).find(sub), std::string::npos) << (msg)

TEST(Checkpoint, SingleFile) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "model.safetensors", {"model.norm.weight", "lm_head.weight", "a"}, 4);
  auto ck = Checkpoint::open(d.path().string());
  EXPECT_EQ(ck->dir(), d.path().string());
  EXPECT_EQ(ck->config()["hidden_size"], 16);
  EXPECT_FALSE(ck->generation_config().has_value());
  EXPECT_FALSE(ck->hf_quant_config().has_value());
  EXPECT_EQ(ck->tensor_names(),
            (std::vector<std::string>{"a", "lm_head.weight", "model.norm.weight"}));
  EXPECT_EQ(ck->get("lm_head.weight").as<float>()[0], 2.0f);
  EXPECT_EQ(ck->find("nope"), nullptr);
  EXPECT_EQ(ck->file_of("a"), p(d, "model.safetensors"));
  EXPECT_EQ(ck->total_tensor_bytes(), 3u * 16u);
  try {
    ck->get("model.embed_tokens.weight");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), d.path().string() + ": tensor 'model.embed_tokens.weight' not found");
  }
}

TEST(Checkpoint, OptionalConfigsAreRead) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_json(d, "generation_config.json", {{"bos_token_id", 1}});
  write_json(d, "hf_quant_config.json",
             {{"producer", {{"name", "modelopt"}}},
              {"quantization", {{"quant_algo", "NVFP4"}, {"group_size", 16}}}});
  write_shard(d, "model.safetensors", {"x"});
  auto ck = Checkpoint::open(d.path().string());
  ASSERT_TRUE(ck->generation_config().has_value());
  EXPECT_EQ((*ck->generation_config())["bos_token_id"], 1);
  ASSERT_TRUE(ck->hf_quant_config().has_value());
  EXPECT_EQ((*ck->hf_quant_config())["quantization"]["quant_algo"], "NVFP4");
}

TEST(Checkpoint, ShardedWithIndex) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "model-00001-of-00002.safetensors", {"a", "b"}, 2);
  write_shard(d, "model-00002-of-00002.safetensors", {"c"}, 8);
  write_index(d, {{"a", "model-00001-of-00002.safetensors"},
                  {"b", "model-00001-of-00002.safetensors"},
                  {"c", "model-00002-of-00002.safetensors"}});
  auto ck = Checkpoint::open(d.path().string());
  EXPECT_EQ(ck->tensor_names(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(ck->file_of("b"), p(d, "model-00001-of-00002.safetensors"));
  EXPECT_EQ(ck->file_of("c"), p(d, "model-00002-of-00002.safetensors"));
  EXPECT_EQ(ck->get("c").shape, (Shape{8}));
  EXPECT_EQ(ck->get("b").as<float>()[1], 2.0f);
  EXPECT_EQ(ck->total_tensor_bytes(), 2u * 8u + 32u);
  EXPECT_EQ(ck->shards().size(), 2u);
}

TEST(Checkpoint, UnlistedTensorInAListedShardIsLoaded) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "s1.safetensors", {"a", "extra"});
  write_index(d, {{"a", "s1.safetensors"}});
  auto ck = Checkpoint::open(d.path().string());
  EXPECT_EQ(ck->tensor_names(), (std::vector<std::string>{"a", "extra"}));
}

TEST(Checkpoint, SingleFileWinsOverIndex) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "model.safetensors", {"single"});
  write_index(d, {{"a", "missing.safetensors"}});
  auto ck = Checkpoint::open(d.path().string());
  EXPECT_EQ(ck->tensor_names(), std::vector<std::string>{"single"});
}

// ---------------------------------------------------------------- broken directories

TEST(CheckpointBad, DirectoryMissing) {
  TempDir d;
  std::string dir = p(d, "absent");
  try {
    Checkpoint::open(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), dir + ": no such checkpoint directory");
  }
}

TEST(CheckpointBad, ConfigMissing) {
  TempDir d;
  write_shard(d, "model.safetensors", {"x"});
  std::string msg = open_error(d);
  EXPECT_HAS(msg, d.path().string() + ": missing config.json");
}

TEST(CheckpointBad, ConfigNotAnObject) {
  TempDir d;
  test::write_file(d / "config.json", "[1, 2, 3]");
  write_shard(d, "model.safetensors", {"x"});
  std::string msg = open_error(d);
  EXPECT_EQ(msg, p(d, "config.json") + ": expected a JSON object, found array");
}

TEST(CheckpointBad, ConfigNotJson) {
  TempDir d;
  test::write_file(d / "config.json", "{\"a\": 1,,}");
  write_shard(d, "model.safetensors", {"x"});
  std::string msg = open_error(d);
  EXPECT_HAS(msg, p(d, "config.json") + ": invalid JSON");
  EXPECT_HAS(msg, "line 1, column 9");
}

TEST(CheckpointBad, QuantConfigNotAnObject) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  test::write_file(d / "hf_quant_config.json", "\"NVFP4\"");
  write_shard(d, "model.safetensors", {"x"});
  EXPECT_EQ(open_error(d), p(d, "hf_quant_config.json") + ": expected a JSON object, found string");
}

// generation_config.json feeds the request defaults (engine/sampling_defaults.h): parsed at load.
TEST(CheckpointBad, GenerationConfigNotAnObjectOrMalformed) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "model.safetensors", {"x"});
  test::write_file(d / "generation_config.json", "[1, 2]");
  EXPECT_EQ(open_error(d), p(d, "generation_config.json") + ": expected a JSON object, found array");
  test::write_file(d / "generation_config.json", "{\"temperature\": ");
  EXPECT_HAS(open_error(d), p(d, "generation_config.json") + ": invalid JSON");
}

TEST(CheckpointBad, NoWeights) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  EXPECT_HAS(open_error(d), "no weights: expected model.safetensors or model.safetensors.index.json");
}

TEST(CheckpointBad, CorruptSingleFileNamesIt) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  test::write_file(d / "model.safetensors", test::raw_safetensors("not json"));
  EXPECT_HAS(open_error(d), p(d, "model.safetensors") + ": safetensors header is not valid JSON");
}

TEST(CheckpointBad, IndexNamesMissingShard) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "s1.safetensors", {"a"});
  write_index(d, {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  std::string msg = open_error(d);
  EXPECT_HAS(msg, p(d, "model.safetensors.index.json"));
  EXPECT_HAS(msg, "shard 's2.safetensors' (listed for tensor 'b') does not exist");
}

TEST(CheckpointBad, TensorInTwoShards) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "s1.safetensors", {"a", "dup"});
  write_shard(d, "s2.safetensors", {"dup", "c"});
  write_index(d, {{"a", "s1.safetensors"}, {"dup", "s1.safetensors"}, {"c", "s2.safetensors"}});
  std::string msg = open_error(d);
  EXPECT_HAS(msg, "tensor 'dup' is stored in two shards");
  EXPECT_HAS(msg, p(d, "s1.safetensors"));
  EXPECT_HAS(msg, p(d, "s2.safetensors"));
  EXPECT_HAS(msg, "expected exactly one");
}

TEST(CheckpointBad, TensorListedInTheWrongShard) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "s1.safetensors", {"a"});
  write_shard(d, "s2.safetensors", {"b"});
  write_index(d, {{"a", "s2.safetensors"}, {"b", "s2.safetensors"}, {"z", "s1.safetensors"}});
  // s1 holds 'a' (unlisted there), the index says s2: a contradiction, not a warning.
  std::string msg = open_error(d);
  EXPECT_HAS(msg, "tensor 'a' is listed in shard 's2.safetensors' but stored in " + p(d, "s1.safetensors"));
}

TEST(CheckpointBad, ListedTensorNotStored) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "s1.safetensors", {"a"});
  write_index(d, {{"a", "s1.safetensors"}, {"ghost", "s1.safetensors"}});
  EXPECT_HAS(open_error(d), "tensor 'ghost' is listed in shard 's1.safetensors' but not found in " +
                                p(d, "s1.safetensors"));
}

TEST(CheckpointBad, IndexShapes) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "s1.safetensors", {"a"});
  auto index = p(d, "model.safetensors.index.json");

  write_json(d, "model.safetensors.index.json", {{"metadata", json::object()}});
  EXPECT_EQ(open_error(d), index + ": missing 'weight_map'");
  write_json(d, "model.safetensors.index.json", {{"weight_map", {1, 2}}});
  EXPECT_EQ(open_error(d),
            index + ": 'weight_map' must be an object (tensor -> shard file), found array");
  write_index(d, {{"a", 7}});
  EXPECT_EQ(open_error(d), index + ": weight_map['a'] must be a shard file name, found integer");
  write_index(d, {{"a", "../s1.safetensors"}});
  EXPECT_HAS(open_error(d), "tensor 'a': shard name '../s1.safetensors' must be a relative path");
  write_index(d, {{"a", "/etc/passwd"}});
  EXPECT_HAS(open_error(d), "shard name '/etc/passwd' must be a relative path");
  test::write_file(index, "[]");
  EXPECT_EQ(open_error(d), index + ": expected a JSON object, found array");
}

TEST(CheckpointBad, CorruptShardNamesTheShard) {
  TempDir d;
  write_json(d, "config.json", kConfig);
  write_shard(d, "s1.safetensors", {"a"});
  test::write_file(d / "s2.safetensors",
                   test::raw_safetensors(R"({"b":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}})", 8));
  write_index(d, {{"a", "s1.safetensors"}, {"b", "s2.safetensors"}});
  std::string msg = open_error(d);
  EXPECT_HAS(msg, p(d, "s2.safetensors") + ": tensor 'b'");
  EXPECT_HAS(msg, "needs 16 bytes");
}

}  // namespace
}  // namespace fp4lm::io::checkpoint_test
