// Hostile inputs through the binary (issue 11 point 6): every case ends with a one-line error and
// the right exit status (1 runtime, 2 usage), never a crash, a hang, an `internal error` or a
// silent success; and Ctrl-C during `quantize` removes its hidden temporary directory.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/checkpoint_edit.h"
#include "common/paths.h"

extern char** environ;

namespace fp4lm::hostile_input_cli_test {
namespace {

using nlohmann::json;
using test::TempDir;
namespace fs = std::filesystem;

test::CommandResult fp4lm(const std::string& args) { return test::run_fp4lm(args); }

// Runs `args`, expects exit status `code` and `needle` in stderr, and no "internal error".
void expect_exit(const std::string& args, int code, const std::string& needle) {
  auto r = fp4lm(args);
  EXPECT_EQ(r.exit_code, code) << args << "\n" << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
  EXPECT_EQ(r.err.find("internal error"), std::string::npos) << args << "\n" << r.err;
}

// A small unquantized Llama checkpoint written by `fp4lm synth`.
std::string synth_model(const TempDir& dir, const std::string& name = "m", const std::string& extra = "") {
  const std::string m = (dir / name).string();
  auto r = fp4lm("synth --out " + m + " --arch LlamaForCausalLM --algo none " + extra);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return m;
}

void edit_config(const std::string& model, const std::string& key, const json& value) {
  const fs::path p = fs::path(model) / "config.json";
  json c = json::parse(test::read_file(p));
  c[key] = value;
  test::write_file(p, c.dump());
}

TEST(HostileInputCli, EvalRefusesIdsFilesWithNothingToScore) {
  TempDir dir;
  const std::string m = synth_model(dir);
  const std::string eval = "eval --model " + m + " --ids ";
  test::write_file(dir / "empty.jsonl", "");
  expect_exit(eval + (dir / "empty.jsonl").string(), 1, "empty.jsonl: no token sequences");
  test::write_file(dir / "blank.jsonl", "\n \n\t\n");
  expect_exit(eval + (dir / "blank.jsonl").string(), 1, "blank.jsonl: no token sequences");
  expect_exit(eval + dir.path().string(), 1, "is a directory");
  test::write_file(dir / "short.jsonl", "[5]\n{\"ids\": []}\n");
  expect_exit(eval + (dir / "short.jsonl").string(), 1, "nothing to score");
  // Deep nesting (used to overflow the stack in a recursive dump, exit 139).
  test::write_file(dir / "deep.jsonl", std::string(200000, '[') + std::string(200000, ']') + "\n");
  expect_exit(eval + (dir / "deep.jsonl").string(), 1, "deep.jsonl:1: invalid JSON: nested deeper than 128 levels");
}

TEST(HostileInputCli, HostileConfigValuesAreRuntimeErrorsNamingConfigJson) {
  TempDir dir;
  const std::string m = synth_model(dir);
  const std::string cfg = m + "/config.json";
  const json original = json::parse(test::read_file(cfg));
  auto expect_config_error = [&](const std::string& key, const json& value, const std::string& needle) {
    edit_config(m, key, value);
    for (const std::string& cmd : {"generate --model " + m + " --prompt-ids 1,2", "inspect --model " + m})
      expect_exit(cmd, 1, cfg + ": " + needle);
    test::write_file(cfg, original.dump());
  };
  expect_config_error("num_hidden_layers", 1000000000, "field 'num_hidden_layers' is 1000000000, more than");
  expect_config_error("vocab_size", int64_t{1} << 40, "field 'vocab_size'");
  expect_config_error("rms_norm_eps", -1e-6, "field 'rms_norm_eps' must be a finite number > 0");
  expect_config_error("rope_theta", 0, "field 'rope_theta' must be a finite number > 0");
  expect_config_error("torch_dtype", "int8", "field 'torch_dtype' is 'int8'");
  // Not "--max-model-len ... exceeds" with exit 2: no flag was given.
  expect_config_error("max_position_embeddings", -5, "field 'max_position_embeddings' must be positive");
}

TEST(HostileInputCli, UnknownKvCacheAlgoIsRefused) {
  TempDir dir;
  const std::string m = (dir / "q").string();
  ASSERT_EQ(fp4lm("synth --out " + m + " --arch LlamaForCausalLM --algo W4A16_NVFP4").exit_code, 0);
  const fs::path p = fs::path(m) / "hf_quant_config.json";
  json q = json::parse(test::read_file(p));
  q["quantization"]["kv_cache_quant_algo"] = "FP9";
  test::write_file(p, q.dump());
  expect_exit("generate --model " + m + " --prompt-ids 1,2", 1, "unsupported kv_cache_quant_algo 'FP9'");
}

TEST(HostileInputCli, InspectSaysWhenTheLoaderRefusesTheCheckpoint) {
  TempDir dir;
  const std::string m = synth_model(dir);
  edit_config(m, "architectures", json::array({"GPTNeoXForCausalLM"}));
  for (const char* extra : {"", " --json"}) {
    auto r = fp4lm("inspect --model " + m + extra);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("unsupported architecture 'GPTNeoXForCausalLM'"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("fp4lm cannot load it"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("GPTNeoXForCausalLM"), std::string::npos) << r.out;  // still described
  }
}

// inspect refuses exactly what generate refuses (issue 41): it loads the model as generate does.
TEST(HostileInputCli, InspectValidatesWhatGenerateValidates) {
  TempDir dir;
  // No final norm.
  const std::string a = synth_model(dir, "no-norm");
  test::edit_tensors(a, [](test::EditedTensor& t) { return t.name != "model.norm.weight"; });
  // An NVFP4 weight_scale byte that is the E4M3 NaN (0x7F).
  const std::string b = (dir / "nan-scale").string();
  ASSERT_EQ(fp4lm("synth --out " + b + " --arch LlamaForCausalLM --algo NVFP4").exit_code, 0);
  test::edit_tensors(b, [](test::EditedTensor& t) {
    if (t.name == "model.layers.0.mlp.down_proj.weight_scale") t.bytes.at(3) = 0x7F;
    return true;
  });
  for (const auto& [m, needle] : {std::pair<std::string, std::string>{a, "model.norm.weight"},
                                  {b, "model.layers.0.mlp.down_proj"}}) {
    for (const std::string& cmd : {"generate --model " + m + " --prompt-ids 1,2", "inspect --model " + m,
                                   "inspect --json --model " + m}) {
      auto r = fp4lm(cmd);
      EXPECT_EQ(r.exit_code, 1) << cmd << "\n" << r.err;
      EXPECT_NE(r.err.find(needle), std::string::npos) << cmd << "\n" << r.err;
      EXPECT_EQ(r.err.find("internal error"), std::string::npos) << cmd << "\n" << r.err;
    }
  }
  // A good checkpoint still inspects with exit 0.
  EXPECT_EQ(fp4lm("inspect --model " + synth_model(dir, "good")).exit_code, 0);
}

// `fp4lm version`: the version line and one CPU line.
TEST(HostileInputCli, VersionPrintsTheCpuLineOnce) {
  auto r = fp4lm("version");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t cpu_lines = 0, lines = 0;
  for (size_t at = 0; at < r.out.size();) {
    const size_t end = r.out.find('\n', at);
    const std::string line = r.out.substr(at, end == std::string::npos ? std::string::npos : end - at);
    lines += !line.empty();
    cpu_lines += line.rfind("cpu: ", 0) == 0;
    at = end == std::string::npos ? r.out.size() : end + 1;
  }
  EXPECT_EQ(cpu_lines, 1u) << r.out;
  EXPECT_EQ(lines, 2u) << r.out;
  EXPECT_EQ(r.err.find("cpu: "), std::string::npos) << r.err;
}

TEST(HostileInputCli, FlagsOutOfRangeAreUsageErrors) {
  TempDir dir;
  const std::string m = synth_model(dir);
  expect_exit("generate --model " + m + " --prompt-ids 1 --seed -1", 2, "--seed");
  expect_exit("generate --model " + m + " --prompt-ids 1 --threads 100000", 2, "threads must be at most");
  expect_exit("eval --model " + m + " --ids x.jsonl --threads 100000", 2, "threads must be at most");
  expect_exit("bench kernels --threads 100000", 2, "--threads: 100000 is more than the maximum");
  expect_exit("synth --out " + (dir / "big").string() + " --hidden 1000000000", 2, "--hidden must be at most 65536");
  expect_exit("synth --out " + (dir / "big").string() + " --hidden 16384 --vocab 1000000", 2,
              "synth writes at most 1e+09");
  EXPECT_FALSE(fs::exists(dir / "big"));
}

TEST(HostileInputCli, SynthOutputErrorsAreRuntimeErrors) {
  TempDir dir;
  test::write_file(dir / "file", "x");
  expect_exit("synth --out " + (dir / "file").string(), 1, "cannot create the output directory");
  expect_exit("synth --out " + (dir / "file" / "sub").string(), 1, "cannot create the output directory");
}

TEST(HostileInputCli, ChatTemplateMessagesAreBounded) {
  TempDir dir;
  test::write_file(dir / "deep.json", std::string(100000, '[') + std::string(100000, ']'));
  expect_exit("chat-template --model " + dir.path().string() + " --messages " + (dir / "deep.json").string(), 1,
              "deep.json: invalid JSON: nested deeper than 128 levels");
  expect_exit("chat-template --model " + dir.path().string() + " --messages " + dir.path().string(), 1,
              "is a directory");
}

// Ctrl-C during quantize: the run ends as SIGINT ends a process, and the hidden temporary
// directory beside OUT is gone, as after any error.
TEST(HostileInputCli, SigintDuringQuantizeRemovesTheTemporaryDirectory) {
  TempDir dir;
  // 78M parameters (156 MB of bfloat16): seconds of quantizing on one thread.
  const std::string m = synth_model(dir, "m", "--hidden 1024 --layers 8 --vocab 4096");
  const fs::path out_parent = dir / "out";
  fs::create_directory(out_parent);
  const std::string out = (out_parent / "q").string();
  const std::string bin = test::fp4lm_bin();
  std::vector<std::string> args = {bin, "quantize", "--model", m, "--out", out, "--algo", "W4A16_NVFP4", "--threads", "1"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  // SIGINT at its default in the child, even where this test runs with it ignored (a background
  // job of a script): quantize leaves an ignored SIGINT ignored.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t def;
  sigemptyset(&def);
  sigaddset(&def, SIGINT);
  posix_spawnattr_setsigdefault(&attr, &def);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, bin.c_str(), &fa, &attr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  // Wait (up to a minute) for the temporary directory to appear, then interrupt.
  bool seen = false;
  for (int i = 0; i < 60000 && !seen; ++i) {
    for (const auto& e : fs::directory_iterator(out_parent))
      if (e.path().filename().string().rfind(".q.fp4lm-tmp-", 0) == 0) seen = true;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ASSERT_TRUE(seen) << "quantize never created its temporary directory";
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  // Killed by the re-raised SIGINT; or, when the quantizer's next write failed first (its
  // directory is gone), exit 1 through the ordinary error path. Never success.
  const bool by_sigint = WIFSIGNALED(status) && WTERMSIG(status) == SIGINT;
  const bool by_error = WIFEXITED(status) && WEXITSTATUS(status) == 1;
  EXPECT_TRUE(by_sigint || by_error) << "status " << status
                                     << (WIFEXITED(status) && WEXITSTATUS(status) == 0
                                             ? ": quantize finished before the signal arrived"
                                             : "");
  for (const auto& e : fs::directory_iterator(out_parent)) ADD_FAILURE() << "left behind: " << e.path();
}

}  // namespace
}  // namespace fp4lm::hostile_input_cli_test
