// The one-request run (engine::generate) and the evaluator on a small random model: stopping
// rules, the server's limits and errors, penalties as in the scheduler, sampling through the
// model, and teacher-forced NLL against the model's own logits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "reference/tiny_models.h"
#include "common/paths.h"
#include "core/error.h"
#include "engine/causal_lm_step_model.h"
#include "engine/evaluator.h"
#include "engine/generator.h"
#include "engine/id_file.h"
#include "engine/scheduler.h"
#include "common/checkpoint_edit.h"
#include "core/thread_pool.h"
#include "model/load/finite_check.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::engine::generator_test {
namespace {

using fp4lm::test::TempDir;

RequestParams request(std::vector<int32_t> prompt, int64_t max_tokens, bool ignore_eos = true) {
  RequestParams p;
  p.prompt = std::move(prompt);
  p.max_tokens = max_tokens;
  p.ignore_eos = ignore_eos;
  return p;
}

class GeneratorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fp4lm::test::write_tiny_model(fp4lm::test::make_tiny_model("Qwen3MoeForCausalLM"), dir_.path());
    model::EngineOptions o;
    o.dtype = "float32";
    model::LoadOptions lo;
    lo.max_model_len = 40;
    lm_ = model::CausalLM::load(dir_.path().string(), o, lo);
  }
  TempDir dir_;
  std::unique_ptr<model::CausalLM> lm_;
};

TEST_F(GeneratorTest, GreedyFollowsTheArgmaxOfFullRecomputation) {
  std::vector<int32_t> streamed;
  GenerationResult r = generate(*lm_, nullptr, request({1, 5, 9}, 6), [&](const RequestOutput& out) {
    EXPECT_EQ(out.token_ids.size(), 1u);  // one token per step, streamed as it is made
    streamed.insert(streamed.end(), out.token_ids.begin(), out.token_ids.end());
  });
  ASSERT_EQ(r.output_ids.size(), 6u);
  EXPECT_EQ(streamed, r.output_ids);
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.decode_steps, 5);
  EXPECT_EQ(r.decode_tokens, 5);
  // Each token is the argmax of a fresh forward over everything before it.
  std::vector<int32_t> seq = {1, 5, 9};
  for (int32_t t : r.output_ids) {
    model::SequenceState c = lm_->new_sequence();
    std::vector<float> logits(lm_->vocab_size());
    lm_->forward(c, seq.data(), static_cast<int64_t>(seq.size()), model::LogitsMode::last, logits.data());
    EXPECT_EQ(t, argmax(logits.data(), lm_->vocab_size()));
    seq.push_back(t);
  }
}

TEST_F(GeneratorTest, StopsAtAStopIdAndEmitsIt) {
  RequestParams p = request({1, 5, 9}, 6);
  GenerationResult full = generate(*lm_, nullptr, p);
  p.stop_token_ids = {full.output_ids[2]};
  GenerationResult r = generate(*lm_, nullptr, p);
  const auto stop = std::find(full.output_ids.begin(), full.output_ids.end(), full.output_ids[2]);
  EXPECT_EQ(r.output_ids, std::vector<int32_t>(full.output_ids.begin(), stop + 1));
  EXPECT_EQ(r.finish_reason, "stop");
  EXPECT_EQ(r.stop_token, full.output_ids[2]);
}

// The one-request run has the scheduler's logits processing: a repetition penalty changes the
// greedy tokens exactly as it does in a served batch, and min_tokens holds back a stop id.
TEST_F(GeneratorTest, PenaltiesAndMinTokensApplyAsInTheScheduler) {
  const RequestParams plain = request({1, 5, 9}, 8);
  GenerationResult a = generate(*lm_, nullptr, plain);
  RequestParams pen = plain;
  pen.repetition_penalty = 2.0;
  pen.presence_penalty = 1.5;
  GenerationResult b = generate(*lm_, nullptr, pen);
  CausalLmStepModel step(*lm_);
  Scheduler sched(step, nullptr, {});
  sched.add(7, pen);
  std::vector<int32_t> served;
  while (sched.has_work())
    for (auto& [id, out] : sched.step()) served.insert(served.end(), out.token_ids.begin(), out.token_ids.end());
  EXPECT_EQ(b.output_ids, served);
  EXPECT_NE(b.output_ids, a.output_ids) << "the penalties changed nothing: a weak test";
  RequestParams held = plain;
  held.stop_token_ids = {a.output_ids[0]};
  held.min_tokens = 3;
  GenerationResult c = generate(*lm_, nullptr, held);
  EXPECT_NE(c.output_ids[0], a.output_ids[0]);
  EXPECT_GE(c.output_ids.size(), 3u);
}

TEST_F(GeneratorTest, SeededSamplingIsReproducible) {
  RequestParams p = request({1, 3}, 12);
  p.sampling.temperature = 1.5;
  p.sampling.seed = 99;
  auto a = generate(*lm_, nullptr, p), b = generate(*lm_, nullptr, p);
  EXPECT_EQ(a.output_ids, b.output_ids);
  p.sampling.seed = 100;
  EXPECT_NE(generate(*lm_, nullptr, p).output_ids, a.output_ids);
}

// The server's limits and messages: the same validator refuses before anything runs.
TEST_F(GeneratorTest, RequestLimitsAreTheServersWithTheSameErrors) {
  EXPECT_NO_THROW(generate(*lm_, nullptr, request({1, 2}, 38)));
  for (int64_t mt : {int64_t{39}, std::numeric_limits<int64_t>::max()}) {
    try {
      generate(*lm_, nullptr, request({1, 2}, mt));
      FAIL() << "expected an error";
    } catch (const RequestError& e) {
      EXPECT_EQ(e.param, "max_tokens");
      EXPECT_NE(std::string(e.what()).find("This model's maximum context length is 40 tokens"), std::string::npos)
          << e.what();
    }
  }
  auto param_of = [&](RequestParams p) -> std::string {
    try {
      generate(*lm_, nullptr, std::move(p));
    } catch (const RequestError& e) {
      return e.param;
    }
    return "";
  };
  EXPECT_EQ(param_of(request({}, 3)), "prompt");
  EXPECT_EQ(param_of(request({1}, 0)), "max_tokens");  // 0 is refused, as by the server
  RequestParams p = request({1}, 3);
  p.repetition_penalty = 0;
  EXPECT_EQ(param_of(p), "repetition_penalty");
  p = request({1}, 3);
  p.logprobs = 21;
  EXPECT_EQ(param_of(p), "logprobs");
}

TEST_F(GeneratorTest, EvaluatorNllIsMinusLogSoftmaxOfTheTarget) {
  const std::vector<int32_t> seq = {1, 50, 7, 7, 93, 12};
  std::vector<double> per_pos;
  EvalResult r = score_sequence(*lm_, seq, 0, [&](const PositionScore& s) {
    // The exposed log-probabilities normalize and agree with the NLL.
    double z = 0;
    for (int64_t v = 0; v < s.vocab; ++v) z += std::exp(static_cast<double>(s.logprobs[v]));
    EXPECT_NEAR(z, 1.0, 1e-5);
    EXPECT_NEAR(-s.logprobs[s.target], s.nll, 1e-5);
    EXPECT_EQ(s.target, seq[s.position]);
    per_pos.push_back(s.nll);
  });
  ASSERT_EQ(r.tokens, 5);
  ASSERT_EQ(per_pos.size(), 5u);
  // Against the model's logits computed in one pass.
  model::SequenceState c = lm_->new_sequence();
  std::vector<float> logits(6 * lm_->vocab_size());
  lm_->forward(c, seq.data(), 6, model::LogitsMode::all, logits.data());
  double sum = 0;
  for (int t = 0; t < 5; ++t) {
    const float* row = logits.data() + t * lm_->vocab_size();
    double mx = -1e300, z = 0;
    for (int64_t v = 0; v < lm_->vocab_size(); ++v) mx = std::max(mx, static_cast<double>(row[v]));
    for (int64_t v = 0; v < lm_->vocab_size(); ++v) z += std::exp(row[v] - mx);
    const double nll = mx + std::log(z) - row[seq[t + 1]];
    EXPECT_NEAR(per_pos[t], nll, 1e-9);
    sum += nll;
  }
  EXPECT_NEAR(r.nll_sum, sum, 1e-9);
  EXPECT_NEAR(r.perplexity(), std::exp(sum / 5), 1e-9);
  // Too-long sequences are rejected; one token scores nothing.
  EXPECT_THROW(score_sequence(*lm_, std::vector<int32_t>(41, 1)), Error);
  EXPECT_EQ(score_sequence(*lm_, {1}).tokens, 0);
}

// A NaN reaching the logits used to make the W4A16 path emit token 0 forever (argmax of NaNs)
// and eval print null: both stop with the one-line NonFiniteError now, on 1 and 2 threads.
TEST(NonFinite, GenerateAndEvalStopWithTheErrorOnW4a16AndW4a4) {
  const int saved = ThreadPool::global().size();
  for (quant::QuantAlgo algo : {quant::QuantAlgo::W4A16_NVFP4, quant::QuantAlgo::NVFP4}) {
    TempDir dir;
    synth::SyntheticOptions s;
    s.architecture = "LlamaForCausalLM";
    s.algo = algo;
    synth::write_synthetic_checkpoint(dir.path().string(), s);
    const float nan = std::nanf("");
    fp4lm::test::edit_tensors(dir.path(), [&](fp4lm::test::EditedTensor& t) {
      if (t.name == "model.embed_tokens.weight") from_f32_n(&nan, t.dtype, t.bytes.data() + 7 * s.hidden * dtype_size(t.dtype), 1);
      return true;
    });
    auto lm = model::CausalLM::load(dir.path().string(), {});
    for (int threads : {1, 2}) {
      ThreadPool::set_global_threads(threads);
      try {
        generate(*lm, nullptr, request({1, 5, 7, 9}, 4, false));
        ADD_FAILURE() << "generate: no error";
      } catch (const model::NonFiniteError& e) {
        EXPECT_STREQ(e.what(), "non-finite value (nan) in the token embedding at position 2 of sequence 0");
      }
      EXPECT_THROW(evaluate(*lm, {{1, 2, 3}, {4, 7, 5}}), model::NonFiniteError);
      EXPECT_EQ(evaluate(*lm, {{1, 2, 3}}).tokens, 2);  // the model still works for clean input
    }
  }
  ThreadPool::set_global_threads(saved);
}

// Greedy generation on an FP8 checkpoint that ships k_scale/v_scale, with a 16-bit and an FP8
// KV cache: both run to the end, reproducibly (closeness of the logits: tests/model/kv_cache_dtype_test).
TEST(KvCacheDtype, GeneratesWithBothCachesOnAnFp8CheckpointWithScales) {
  TempDir dir;
  synth::SyntheticOptions s;
  s.architecture = "Qwen3ForCausalLM";
  s.algo = quant::QuantAlgo::FP8;
  synth::write_synthetic_checkpoint(dir.path().string(), s);
  std::vector<fp4lm::test::EditedTensor> scales;
  for (int64_t l = 0; l < s.layers; ++l)
    for (const char* n : {"k_proj.k_scale", "v_proj.v_scale"}) {
      const float v = 0.02f;
      fp4lm::test::EditedTensor t{fmt::format("model.layers.{}.self_attn.{}", l, n), DType::F32, {}, std::vector<uint8_t>(4)};
      std::memcpy(t.bytes.data(), &v, 4);
      scales.push_back(std::move(t));
    }
  fp4lm::test::edit_tensors(dir.path(), [](fp4lm::test::EditedTensor&) { return true; }, std::move(scales));
  const RequestParams p = request({1, 40, 7, 99, 3}, 8);
  for (const char* kv : {"bfloat16", "fp8"}) {
    model::EngineOptions o;
    o.dtype = "bfloat16";
    o.kv_cache_dtype = kv;
    auto lm = model::CausalLM::load(dir.path().string(), o);
    GenerationResult r = generate(*lm, nullptr, p);
    EXPECT_EQ(r.output_ids.size(), 8u) << kv;
    EXPECT_EQ(r.output_ids, generate(*lm, nullptr, p).output_ids) << kv;
    for (int32_t t : r.output_ids) EXPECT_TRUE(t >= 0 && t < lm->vocab_size()) << kv;
  }
}

TEST(IdFile, ReadsAllThreeLineForms) {
  TempDir dir;
  fp4lm::test::write_file(dir / "ids.jsonl",
                   "{\"ids\": [1, 2, 3]}\n\n[4, 5]\n{\"prompt_ids\": [1], \"greedy_continuation\": [7, 8]}\n"
                   "{\"prompt_ids\": [1, 9], \"greedy_ids\": [6]}\n");
  auto recs = read_id_records((dir / "ids.jsonl").string());
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[0].all(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(recs[1].all(), (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(recs[2].prompt, (std::vector<int32_t>{1}));
  EXPECT_EQ(recs[2].continuation, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(recs[3].all(), (std::vector<int32_t>{1, 9, 6}));
}

TEST(IdFile, ErrorsNameFileAndLine) {
  TempDir dir;
  auto expect_error = [&](const std::string& content, const std::string& needle) {
    fp4lm::test::write_file(dir / "bad.jsonl", content);
    try {
      read_id_records((dir / "bad.jsonl").string());
      FAIL() << "expected an error for " << content;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  expect_error("[1, 2]\n{oops\n", "bad.jsonl:2: invalid JSON");
  expect_error("", "bad.jsonl: no token sequences (the file is empty or has only blank lines)");
  expect_error("\n  \n\t\r\n", "bad.jsonl: no token sequences");
  // Deep nesting is refused by the parser, before anything recursive (dump, copy) walks it.
  expect_error(std::string(100000, '[') + std::string(100000, ']') + "\n",
               "bad.jsonl:1: invalid JSON: nested deeper than 128 levels");
  expect_error("{\"ids\": " + std::string(200, '[') + std::string(200, ']') + "}\n", "nested deeper than");
  expect_error("[1]\n[" + std::string(kMaxIdLineBytes, ' ') + "1]\n", "bad.jsonl:2: line longer than 32 MiB");
  expect_error("[1, -2]\n", "bad.jsonl:1: token ids must be non-negative integers");
  expect_error("{\"tokens\": [1]}\n", "bad.jsonl:1: expected a list of ids or an object");
  expect_error("[1, 2.5]\n", "non-negative integers, found 2.5");
  EXPECT_THROW(read_id_records((dir / "absent.jsonl").string()), Error);
  try {
    read_id_records(dir.path().string());
    FAIL() << "a directory was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp4lm::engine::generator_test
