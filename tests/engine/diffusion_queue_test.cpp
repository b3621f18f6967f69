// engine/diffusion_queue.h and Engine over a DiffusionGemma Runtime (what `serve` and fp4lm.LLM
// run): the blocks come out a canvas per output and together equal transformers' generate
// (the fixture's goldens, scripts/make_diffusion_gemma_goldens.py); requests run one at a time,
// in arrival order; a cancel between canvases ends the request with "abort"; what the loop cannot
// honour, or a cache larger than the budget, is refused by name before anything runs.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "engine/diffusion_queue.h"
#include "engine/engine.h"
#include "engine/runtime.h"

namespace fp4lm::engine::diffusion_queue_test {
namespace {

using nlohmann::json;

std::string fixture() { return (test::source_dir() / "tests/model/fixtures/diffusion_gemma/tiny").string(); }

json golden_case(const std::string& name) {
  std::ifstream in(std::filesystem::path(fixture()) / "goldens.json");
  const json g = json::parse(in);
  for (const json& c : g["cases"])
    if (c["name"] == name) return c;
  ADD_FAILURE() << name;
  return {};
}

RequestParams request_of(const json& c, bool ignore_eos = true) {
  RequestParams p;
  p.prompt = c["prompt_ids"].get<std::vector<int32_t>>();
  p.max_tokens = c["max_tokens"].get<int64_t>();
  p.sampling.temperature = 0;
  p.ignore_eos = ignore_eos;
  p.stop_token_ids = c["stop_token_ids"].get<std::vector<int32_t>>();
  return p;
}

const Runtime& runtime() {
  static const Runtime rt = Runtime::load_any(fixture(), {}, {});
  return rt;
}

DiffusionQueue make_queue(size_t budget = 0) {
  SchedulerConfig cfg;
  cfg.kv_cache_bytes = budget;
  return DiffusionQueue(*runtime().diffusion(), runtime().diffusion_schedule(), nullptr, runtime().max_model_len(), cfg);
}

TEST(DiffusionRuntime, LoadAnyOpensTheDiffusionModelAndKeepsTheCausalAccessorsClosed) {
  const Runtime& rt = runtime();
  ASSERT_NE(rt.diffusion(), nullptr);
  EXPECT_EQ(rt.vocab_size(), 96);
  EXPECT_EQ(rt.max_model_len(), 256);  // min(max_position_embeddings, 8192)
  EXPECT_EQ(rt.eos_ids(), std::vector<int64_t>{1});  // generation_config.json's, as transformers
  EXPECT_EQ(rt.diffusion_schedule().max_denoising_steps, 6);
  try {
    rt.model();
    ADD_FAILURE() << "model() of a DiffusionGemma runtime";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a token-by-token model"), std::string::npos) << e.what();
  }
  // load() (eval, bench) still refuses it by name.
  EXPECT_THROW(Runtime::load(fixture(), {}, {}), Error);
}

TEST(DiffusionQueue, EachStepIsOneCanvasAndTheBlocksEqualTransformers) {
  for (const char* name : {"two_canvases", "three_canvases_long_prompt"}) {
    const json c = golden_case(name);
    DiffusionQueue q = make_queue();
    const RequestParams p = request_of(c);
    q.check(p);
    q.add(7, p);
    std::vector<int32_t> out;
    int64_t outputs = 0;
    while (q.has_work()) {
      for (auto& [id, o] : q.step()) {
        EXPECT_EQ(id, 7);
        ++outputs;
        EXPECT_EQ(o.token_ids.size(), 8u) << name;  // a whole canvas
        out.insert(out.end(), o.token_ids.begin(), o.token_ids.end());
        EXPECT_EQ(o.prompt_tokens, static_cast<int64_t>(p.prompt.size()));
        EXPECT_EQ(o.completion_tokens, static_cast<int64_t>(out.size()));
        if (o.finished) {
          EXPECT_EQ(o.finish_reason, "length");
        }
      }
    }
    EXPECT_EQ(outputs, c["max_tokens"].get<int64_t>() / 8) << name;
    EXPECT_EQ(out, c["output_ids"].get<std::vector<int32_t>>()) << name;
    EXPECT_EQ(q.kv_reserved_bytes(), 0u);
  }
}

TEST(DiffusionQueue, AStopTokenEndsTheRequestInsideItsCanvas) {
  const json c = golden_case("stop_token");
  DiffusionQueue q = make_queue();
  q.add(1, request_of(c, false));
  std::vector<RequestOutput> outs;
  while (q.has_work())
    for (auto& [id, o] : q.step()) outs.push_back(o);
  ASSERT_EQ(outs.size(), 2u);
  ASSERT_TRUE(outs.back().finished);
  EXPECT_EQ(outs.back().finish_reason, "stop");
  EXPECT_EQ(outs.back().stop_token, 52);
  EXPECT_EQ(outs.back().token_ids, (std::vector<int32_t>{52}));  // the second canvas's first token
  EXPECT_EQ(outs.back().completion_tokens, 9);
}

TEST(DiffusionQueue, RequestsRunOneAtATimeInArrivalOrderAndACancelAbortsBetweenCanvases) {
  const json c = golden_case("two_canvases");
  DiffusionQueue q = make_queue();
  q.add(1, request_of(c));
  q.add(2, request_of(c));
  q.add(3, request_of(c));
  auto outs = q.step();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].first, 1);
  EXPECT_EQ(q.num_running(), 1);
  EXPECT_EQ(q.num_waiting(), 2);
  EXPECT_GT(q.kv_reserved_bytes(), 0u);
  q.cancel(1);
  q.cancel(3);
  outs = q.step();  // 1 and 3 abort, 2 starts and runs its first canvas
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(outs[0].first, 3);
  EXPECT_EQ(outs[0].second.finish_reason, "abort");
  EXPECT_EQ(outs[1].first, 1);
  EXPECT_EQ(outs[1].second.finish_reason, "abort");
  EXPECT_EQ(outs[2].first, 2);
  EXPECT_FALSE(outs[2].second.finished);
  std::vector<int32_t> want = c["output_ids"].get<std::vector<int32_t>>();
  want.resize(8);
  EXPECT_EQ(outs[2].second.token_ids, want);  // the same first canvas as request 1's
  outs = q.step();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_TRUE(outs[0].second.finished);
  EXPECT_FALSE(q.has_work());
}

TEST(DiffusionQueue, WhatTheLoopCannotHonourIsRefusedByName) {
  const DiffusionQueue q = make_queue();
  const RequestParams base = request_of(golden_case("two_canvases"));
  auto param_of = [&](auto change) {
    RequestParams p = base;
    change(p);
    try {
      q.check(p);
    } catch (const RequestError& e) {
      return e.param;
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(param_of([](RequestParams& p) { p.sampling.temperature = 0.7; }), "temperature");
  EXPECT_EQ(param_of([](RequestParams& p) { p.logprobs = 0; }), "logprobs");
  EXPECT_EQ(param_of([](RequestParams& p) { p.prompt_logprobs = 1; }), "prompt_logprobs");
  EXPECT_EQ(param_of([](RequestParams& p) { p.presence_penalty = 0.5; }), "presence_penalty");
  EXPECT_EQ(param_of([](RequestParams& p) { p.frequency_penalty = 0.5; }), "frequency_penalty");
  EXPECT_EQ(param_of([](RequestParams& p) { p.stop = {"x"}; }), "stop");
  EXPECT_EQ(param_of([](RequestParams& p) { p.sampling.top_p = 0.5; }), "top_p");
  EXPECT_EQ(param_of([](RequestParams& p) { p.min_tokens = 2; }), "min_tokens");
  EXPECT_EQ(param_of([](RequestParams& p) { p.stop_token_ids = {500}; }), "stop_token_ids");  // validate()'s range
  // 250 positions of 256: the prompt's 4 plus 32 canvases of 8 do not fit.
  EXPECT_EQ(param_of([](RequestParams& p) { p.max_tokens = 250; }), "max_tokens");
  EXPECT_EQ(param_of([](RequestParams& p) { p.max_tokens = 248; }), "(accepted)");
  EXPECT_EQ(param_of([](RequestParams& p) { p.sampling.temperature = 1; }), "(accepted)");
  // A budget smaller than one request's cache refuses it rather than running out of memory.
  const DiffusionQueue small = make_queue(q.sequence_bytes(20));
  EXPECT_NO_THROW(small.check(base));  // 4 + 16 positions
  RequestParams longer = base;
  longer.max_tokens = 24;
  EXPECT_THROW(small.check(longer), RequestError);
}

TEST(DiffusionEngine, TheServingEngineStreamsABlockPerOutput) {
  const json c = golden_case("two_canvases");
  SchedulerConfig cfg;
  Engine e(runtime(), nullptr, cfg);
  EXPECT_EQ(e.max_model_len(), 256);
  EXPECT_THROW(e.submit([&] {
    RequestParams p = request_of(c);
    p.logprobs = 1;
    return p;
  }()),
               RequestError);
  auto h = e.submit(request_of(c));
  std::vector<RequestOutput> outs;
  while (outs.empty() || !outs.back().finished)
    for (auto& o : h->wait(std::chrono::milliseconds(200))) outs.push_back(std::move(o));
  ASSERT_EQ(outs.size(), 2u);
  std::vector<int32_t> ids = outs[0].token_ids;
  ids.insert(ids.end(), outs[1].token_ids.begin(), outs[1].token_ids.end());
  EXPECT_EQ(ids, c["output_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(outs[1].finish_reason, "length");
}

}  // namespace
}  // namespace fp4lm::engine::diffusion_queue_test
