// `fp4lm generate` and `fp4lm eval` through the binary: the stories260k reference via
// --prompt-ids (--json and streamed), text and chat prompts through a checkpoint's tokenizer,
// stderr reports, and usage/runtime errors with their exit codes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "reference/tiny_models.h"
#include "../tokenizer/tokenizer_fixtures.h"
#include "common/paths.h"

namespace fp4lm::generate_cli_test {
namespace {

using nlohmann::json;
using test::TempDir;

test::CommandResult fp4lm(const std::string& args) { return test::run_fp4lm(args); }

std::string ids_arg(const json& ids) {
  std::string s;
  for (const auto& v : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(v.get<int>());
  }
  return s;
}

std::string stories() { return (test::shared_dir() / "models/stories260k").string(); }

TEST(GenerateCli, Stories260kPromptIdsReproduceTheReferenceAsJson) {
  FP4LM_REQUIRE_SHARED("models/stories260k/reference_greedy.jsonl");
  std::ifstream in(test::shared_dir() / "models/stories260k/reference_greedy.jsonl");
  std::string line;
  int lines = 0;
  while (std::getline(in, line)) {
    json ref = json::parse(line);
    auto r = fp4lm("generate --model " + stories() + " --prompt-ids " + ids_arg(ref["prompt_ids"]) +
                   " --max-tokens " + std::to_string(ref["greedy_continuation"].size()) + " --dtype float32 --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    json out = json::parse(r.out);
    EXPECT_EQ(out["prompt_ids"], ref["prompt_ids"]);
    EXPECT_EQ(out["output_ids"], ref["greedy_continuation"]);
    EXPECT_EQ(out["text"], "");  // no tokenizer in this checkpoint
    for (const char* k : {"load_s", "prefill_tok_s", "decode_tok_s"}) {
      ASSERT_TRUE(out["timings"].contains(k)) << k;
      EXPECT_GE(out["timings"][k].get<double>(), 0.0) << k;
    }
    EXPECT_GT(out["timings"]["decode_tok_s"].get<double>(), 0.0);
    // stderr: the oracle's backend line, load time, memory, throughput.
    // (whichever backend wins on this CPU: cpu_dense_avx512 / cpu_dense_avx2, reference without)
    EXPECT_NE(r.err.find("' unquantized Linear backend out of potential backends: [cpu_dense_"), std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("cpu_dense_avx2, reference]"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("' attention kernel out of potential kernels: [avx512, avx2, reference]"), std::string::npos)
        << r.err;
    for (const char* needle : {"Loaded LlamaForCausalLM", "resident weight bytes", "peak RSS", "tokens/s", "prompt: ",
                               "decode: "})
      EXPECT_NE(r.err.find(needle), std::string::npos) << needle << "\n" << r.err;
    ++lines;
  }
  EXPECT_EQ(lines, 2);
}

TEST(GenerateCli, SpeculativeDecodingKeepsTheReferenceGreedyTokens) {
  FP4LM_REQUIRE_SHARED("models/stories260k/reference_greedy.jsonl");
  std::ifstream in(test::shared_dir() / "models/stories260k/reference_greedy.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    json ref = json::parse(line);
    auto r = fp4lm("generate --model " + stories() + " --prompt-ids " + ids_arg(ref["prompt_ids"]) + " --max-tokens " +
                   std::to_string(ref["greedy_continuation"].size()) +
                   " --dtype float32 --json --speculative-config '{\"method\": \"ngram\", "
                   "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 3}'");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(json::parse(r.out)["output_ids"], ref["greedy_continuation"]);
    EXPECT_NE(r.err.find("speculative decoding: "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(" draft tokens accepted"), std::string::npos) << r.err;
  }
  auto bad = fp4lm("generate --model " + stories() + " --prompt-ids 1 --speculative-config '{\"method\": \"x\"}'");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--speculative-config: method 'x' is not supported"), std::string::npos) << bad.err;
  // A Llama has no MTP head: a runtime error naming the config, exit 1.
  auto no_head = fp4lm("generate --model " + stories() +
                       " --prompt-ids 1 --speculative-config '{\"method\": \"qwen3_next_mtp\", \"num_speculative_tokens\": 2}'");
  EXPECT_EQ(no_head.exit_code, 1);
  EXPECT_NE(no_head.err.find("config.json: the model has no MTP layers"), std::string::npos) << no_head.err;
}

// `fp4lm synth --mtp-head` writes a hybrid with a real MTP head; speculating with it (both of
// vLLM's spellings) keeps the greedy tokens, at bfloat16 and float32, NVFP4 and unquantized.
TEST(GenerateCli, MtpSpeculationKeepsTheGreedyTokens) {
  TempDir dir;
  for (const char* algo : {"NVFP4", "none"}) {
    const std::string model = (dir.path() / algo).string();
    auto w = fp4lm(std::string("synth --out ") + model + " --arch Qwen3_5MoeForCausalLM --mtp-head --algo " + algo);
    ASSERT_EQ(w.exit_code, 0) << w.err;
    for (const char* dtype : {"bfloat16", "float32"}) {
      const std::string base = "generate --model " + model + " --prompt-ids 1,2,3,4,5 --max-tokens 24 --json --dtype " + dtype;
      auto plain = fp4lm(base);
      ASSERT_EQ(plain.exit_code, 0) << plain.err;
      for (const char* method : {"mtp", "qwen3_next_mtp"}) {
        auto spec = fp4lm(base + " --speculative-config '{\"method\": \"" + method + "\", \"num_speculative_tokens\": 2}'");
        ASSERT_EQ(spec.exit_code, 0) << spec.err;
        EXPECT_EQ(json::parse(spec.out)["output_ids"], json::parse(plain.out)["output_ids"]) << algo << " " << dtype;
        EXPECT_NE(spec.err.find("drafts per step from the model's MTP head"), std::string::npos) << spec.err;
        EXPECT_NE(spec.err.find(" draft tokens accepted"), std::string::npos) << spec.err;
      }
    }
  }
}

TEST(GenerateCli, StreamsIdsWhenTheCheckpointHasNoTokenizer) {
  FP4LM_REQUIRE_SHARED("models/stories260k");
  auto r = fp4lm("generate --model " + stories() + " --prompt-ids 1 --max-tokens 5 --dtype float32");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "461 461 401 401 401\n");
}

TEST(GenerateCli, SameSeedSameSampledOutput) {
  FP4LM_REQUIRE_SHARED("models/stories260k");
  const std::string args = "generate --model " + stories() +
                           " --prompt-ids 1,300 --max-tokens 20 --temperature 1 --top-p 0.9 --top-k 40 --min-p 0.05 --json";
  auto a = fp4lm(args + " --seed 3"), b = fp4lm(args + " --seed 3"), c = fp4lm(args + " --seed 4");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(json::parse(a.out)["output_ids"], json::parse(b.out)["output_ids"]);
  EXPECT_NE(json::parse(a.out)["output_ids"], json::parse(c.out)["output_ids"]);
}

// A tiny random model whose vocabulary is the GPT-2-style fixture tokenizer's (269 ids), with a
// minimal chat template.
void write_model_with_tokenizer(const TempDir& dir) {
  test::write_tiny_model(test::make_tiny_model("Qwen3ForCausalLM", 7, false, 269), dir.path());
  test::write_file(dir / "tokenizer.json", tokenizer::fixtures::gpt2().dump());
  json cfg = {{"chat_template",
               "{% for m in messages %}<|endoftext|>{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
               "{% if add_generation_prompt %}assistant:{% endif %}"},
              {"eos_token", "<|endoftext|>"}};
  test::write_file(dir / "tokenizer_config.json", cfg.dump());
}

TEST(GenerateCli, TextAndChatPromptsGoThroughTheTokenizer) {
  TempDir dir;
  write_model_with_tokenizer(dir);
  const std::string base = "generate --model " + dir.path().string() + " --dtype float32 --max-tokens 8";
  auto r = fp4lm(base + " --prompt 'hello world' --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json out = json::parse(r.out);
  EXPECT_EQ(out["prompt_ids"], json::array({259, 267}));  // "hello", "Ġworld"
  ASSERT_EQ(out["output_ids"].size(), 8u);
  // Streaming prints the same text as --json reports.
  auto streamed = fp4lm(base + " --prompt 'hello world'");
  ASSERT_EQ(streamed.exit_code, 0) << streamed.err;
  EXPECT_EQ(streamed.out, out["text"].get<std::string>() + "\n");
  // The same ids as --prompt-ids give the same output.
  auto by_ids = fp4lm(base + " --prompt-ids 259,267 --json");
  EXPECT_EQ(json::parse(by_ids.out)["output_ids"], out["output_ids"]);

  auto chat = fp4lm(base + " --chat hello --json");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  // "<|endoftext|>user: hello\nassistant:" encoded: the special token first, then bytes/merges.
  json pid = json::parse(chat.out)["prompt_ids"];
  ASSERT_GT(pid.size(), 3u);
  EXPECT_EQ(pid[0], 268);
  EXPECT_NE(std::find(pid.begin(), pid.end(), json(259)), pid.end());  // "hello"
}

TEST(GenerateCli, UsageErrorsExitTwo) {
  TempDir dir;
  write_model_with_tokenizer(dir);
  const std::string m = "generate --model " + dir.path().string();
  for (const std::string& args :
       {m, m + " --prompt a --prompt-ids 1", m + " --prompt-ids 1,x", m + " --prompt-ids 1 --temperature -1",
        m + " --prompt-ids 1 --top-p 0", m + " --prompt-ids 1 --dtype float64", m + " --prompt-ids 1 --linear-backend nope",
        m + " --prompt-ids 1 --max-model-len 100000", m + " --prompt-ids 1 --max-tokens -1",
        m + " --prompt-ids 1 --kv-cache-dtype fp4", m + " --prompt-ids 1 --max-tokens 0",
        m + " --prompt-ids 1 --stop-token-ids 1,x"}) {
    auto r = fp4lm(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    EXPECT_NE(r.err.find("error"), std::string::npos) << args;
  }
}

// A request the server would refuse with a 400 is a usage error (exit 2) with the server's
// message, its parameter in flag spelling.
TEST(GenerateCli, RequestErrorsAreTheServersInFlagSpelling) {
  TempDir dir;
  test::write_tiny_model(test::make_tiny_model("LlamaForCausalLM"), dir.path());
  auto expect = [&](const std::string& args, const std::string& message) {
    auto r = fp4lm("generate --model " + dir.path().string() + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    const size_t at = r.err.rfind("fp4lm: error: ");
    ASSERT_NE(at, std::string::npos) << args << "\n" << r.err;
    EXPECT_EQ(r.err.substr(at), "fp4lm: error: " + message + "\n") << args;
  };
  expect("--prompt-ids 1,2,3 --max-model-len 16 --max-tokens 14",
         "--max-tokens: This model's maximum context length is 16 tokens. However, you requested 17 tokens (3 in the "
         "prompt, 14 for the completion). Please reduce the length of the prompt or the completion.");
  expect("--prompt-ids 1 --max-model-len 16 --max-tokens 9223372036854775807",
         "--max-tokens: This model's maximum context length is 16 tokens. However, you requested 9223372036854775808 "
         "tokens (1 in the prompt, 9223372036854775807 for the completion). Please reduce the length of the prompt "
         "or the completion.");
  expect("--prompt-ids 1,500", "token id 500 is outside the vocabulary [0, 97)");
  expect("--prompt-ids 1 --max-tokens 0", "--max-tokens must be at least 1, got 0");
  expect("--prompt-ids 1 --repetition-penalty 0", "--repetition-penalty must be in (0, 2], got 0");
  expect("--prompt-ids 1 --presence-penalty 2.5", "--presence-penalty must be in [-2, 2], got 2.5");
  expect("--prompt-ids 1 --logprobs 21", "--logprobs must be at most 20, got 21");
  expect("--prompt-ids 1 --min-tokens 5 --max-tokens 2", "--min-tokens (5) must be <= max_tokens (2)");
  expect("--prompt-ids 1 --temperature -1", "--temperature must be a finite number >= 0, got -1");
  // Engine settings are checked together before anything loads (engine::create_engine_config).
  expect("--prompt-ids 1 --pipeline-parallel-size 2 --speculative-config '{\"method\": \"mtp\", "
         "\"num_speculative_tokens\": 1}'",
         "--speculative-config: method mtp does not run over pipeline stages (pipeline_parallel_size 2)");
  auto r = fp4lm("generate --model " + dir.path().string() + " --prompt-ids 1 --linear-backend nope");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("fp4lm: error: --linear-backend: unknown backend 'nope' (available: "), std::string::npos)
      << r.err;
}

// The server's sampling parameters: a stop string ends the text before it (finish "stop",
// stop_reason the string), --logprobs reports each token with its top-N, and a repetition
// penalty changes the greedy tokens.
TEST(GenerateCli, StopStringsLogprobsAndPenaltiesAsTheServerHasThem) {
  TempDir dir;
  write_model_with_tokenizer(dir);
  const std::string base = "generate --model " + dir.path().string() + " --dtype float32 --max-tokens 12 --json "
                           "--prompt 'hello world' --ignore-eos";
  auto plain = fp4lm(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const json p = json::parse(plain.out);
  const std::string text = p["text"];
  ASSERT_GE(text.size(), 6u) << text;
  // A one-character stop string the greedy text contains past its start (ASCII: whole characters).
  const auto pos = std::find_if(text.begin() + 2, text.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)); });
  ASSERT_NE(pos, text.end()) << text;
  const std::string stop(1, *pos);
  auto stopped = fp4lm(base + " --stop '" + stop + "' --logprobs 2");
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  const json s = json::parse(stopped.out);
  EXPECT_EQ(s["text"], text.substr(0, text.find(stop)));
  EXPECT_EQ(s["finish_reason"], "stop");
  EXPECT_EQ(s["stop_reason"], stop);
  ASSERT_EQ(s["logprobs"].size(), s["output_ids"].size());
  for (size_t i = 0; i < s["logprobs"].size(); ++i) {
    EXPECT_EQ(s["logprobs"][i]["id"], s["output_ids"][i]);
    EXPECT_EQ(s["logprobs"][i]["top"].size(), 2u);
    EXPECT_LE(s["logprobs"][i]["logprob"].get<double>(), 0.0);
  }
  auto penalized = fp4lm(base + " --repetition-penalty 1.8 --frequency-penalty 1");
  ASSERT_EQ(penalized.exit_code, 0) << penalized.err;
  EXPECT_NE(json::parse(penalized.out)["output_ids"], p["output_ids"]);
}

TEST(GenerateCli, RuntimeErrorsExitOneWithAClearLine) {
  TempDir dir;
  test::write_tiny_model(test::make_tiny_model("LlamaForCausalLM"), dir.path());
  auto expect = [&](const std::string& args, const std::string& needle) {
    auto r = fp4lm("generate --model " + dir.path().string() + " " + args);
    EXPECT_EQ(r.exit_code, 1) << args << "\n" << r.err;
    EXPECT_NE(r.err.find(needle), std::string::npos) << args << "\n" << r.err;
  };
  expect("--prompt hi", "no tokenizer.json");
  auto r = fp4lm("generate --model " + (dir / "absent").string() + " --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 1) << r.err;
}

TEST(GenerateCli, NonFiniteValuesStopWithOneLineNamingThePlace) {
  TempDir dir;
  // Qwen3: lm_head is not tied to the embedding (a NaN embedding row would also be a NaN logit).
  test::TinyModel m = test::make_tiny_model("Qwen3ForCausalLM");
  m.w["model.embed_tokens.weight"].v[5 * 32 + 1] = std::nanf("");  // token 5's row (hidden 32)
  test::write_tiny_model(m, dir.path());
  for (const char* threads : {"1", "2"}) {
    auto r = fp4lm("generate --model " + dir.path().string() + " --prompt-ids 1,2,5 --threads " + threads);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("non-finite value (nan) in the token embedding at position 2 of sequence 0\n"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.out, "");  // no token 0 stream
    auto e = fp4lm("generate --model " + dir.path().string() + " --prompt-ids 1,2 --max-tokens 3 --kv-cache-dtype fp8 "
                   "--threads " + threads);
    EXPECT_EQ(e.exit_code, 0) << e.err;  // clean input runs (here with an FP8 KV cache)
    EXPECT_NE(e.err.find("fp8 KV cache"), std::string::npos) << e.err;
  }
}

TEST(EvalCli, ReportsTokensNllAndPerplexity) {
  FP4LM_REQUIRE_SHARED("models/tiny-qwen3-moe/heldout.jsonl");
  TempDir dir;
  // The first 6 held-out sequences (bare lists) plus one {"ids"} and one prompt/continuation line.
  std::ifstream in(test::shared_dir() / "models/tiny-qwen3-moe/heldout.jsonl");
  std::string content, line;
  int64_t expect_tokens = 0;
  for (int i = 0; i < 6 && std::getline(in, line); ++i) {
    content += line + "\n";
    expect_tokens += static_cast<int64_t>(json::parse(line).size()) - 1;
  }
  content += "{\"ids\": [1, 300, 301]}\n{\"prompt_ids\": [1, 300], \"greedy_continuation\": [302]}\n";
  expect_tokens += 4;
  test::write_file(dir / "ids.jsonl", content);
  const std::string args = "eval --model " + (test::shared_dir() / "models/tiny-qwen3-moe").string() + " --ids " +
                           (dir / "ids.jsonl").string() + " --dtype float32";
  auto r = fp4lm(args + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json out = json::parse(r.out);
  EXPECT_EQ(out["sequences"], 8);
  EXPECT_EQ(out["tokens"], expect_tokens);
  const double nll = out["mean_nll"], ppl = out["perplexity"];
  EXPECT_NEAR(ppl, std::exp(nll), 1e-9 * ppl);
  EXPECT_GT(nll, 2.5);  // a weak model: held-out NLL near its 3.74 average
  EXPECT_LT(nll, 5.0);
  auto human = fp4lm(args);
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("tokens: " + std::to_string(expect_tokens) + "\n"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("perplexity: "), std::string::npos);
  EXPECT_NE(human.out.find("mean_nll: "), std::string::npos);

  auto bad = fp4lm("eval --model " + (test::shared_dir() / "models/tiny-qwen3-moe").string() + " --ids " +
                   (dir / "absent.jsonl").string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("absent.jsonl: cannot open"), std::string::npos) << bad.err;
}

// --dump-logits: every position's logits, one JSON line per sequence. Row t is the output after
// tokens [0, t] (the last row predicts past the sequence); the NLL recomputed from the dumped
// rows equals eval's own mean_nll, so the rows are the ones eval scored, at the right positions.
TEST(EvalCli, DumpLogitsWritesEveryPositionAndAgreesWithTheNll) {
  FP4LM_REQUIRE_SHARED("models/tiny-qwen3-moe/heldout.jsonl");
  TempDir dir;
  test::write_file(dir / "ids.jsonl", "[1, 300, 301, 302, 5]\n{\"ids\": [1, 7]}\n");
  const std::string model = (test::shared_dir() / "models/tiny-qwen3-moe").string();
  const std::string dump = (dir / "logits.jsonl").string();
  auto r = fp4lm("eval --model " + model + " --ids " + (dir / "ids.jsonl").string() + " --dtype float32 --json " +
                 "--dump-logits " + dump);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json stats = json::parse(r.out);
  std::ifstream in(dump);
  std::string line;
  std::vector<json> lines;
  while (std::getline(in, line)) lines.push_back(json::parse(line));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["ids"], json::parse("[1, 300, 301, 302, 5]"));
  EXPECT_EQ(lines[1]["sequence"], 1);
  double nll = 0;
  int64_t tokens = 0;
  for (const json& l : lines) {
    const int64_t vocab = l["vocab"];
    ASSERT_EQ(l["logits"].size(), l["ids"].size());  // every position, the last one included
    for (size_t t = 0; t < l["logits"].size(); ++t) {
      const std::vector<double> row = l["logits"][t];
      ASSERT_EQ(static_cast<int64_t>(row.size()), vocab);
      if (t + 1 == l["ids"].size()) break;
      double mx = -INFINITY, sum = 0;
      for (double v : row) mx = std::max(mx, v);
      for (double v : row) sum += std::exp(v - mx);
      nll += mx + std::log(sum) - row[l["ids"][t + 1].get<size_t>()];
      ++tokens;
    }
  }
  EXPECT_EQ(tokens, stats["tokens"]);
  EXPECT_NEAR(nll / static_cast<double>(tokens), stats["mean_nll"].get<double>(), 1e-6);
  EXPECT_GT(nll / static_cast<double>(tokens), 1.0);  // not a degenerate all-equal row

  auto bad = fp4lm("eval --model " + model + " --ids " + (dir / "ids.jsonl").string() + " --dump-logits " +
                   (dir / "absent" / "logits.jsonl").string());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("logits.jsonl: cannot open for writing"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace fp4lm::generate_cli_test
