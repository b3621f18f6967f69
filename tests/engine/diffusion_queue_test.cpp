// engine/diffusion_queue.h and Engine over a DiffusionGemma Runtime (what `serve` and fp4lm.LLM
// run): the blocks come out a canvas per output and together equal transformers' generate
// (the fixture's goldens, scripts/make_diffusion_gemma_goldens.py); requests run together, a
// decoder pass of each per step, each equal to its run alone, within max_num_seqs and the cache
// budget (the others wait); a cancel ends the request with "abort" at the next step; what the
// loop cannot honour, or a cache larger than the budget, is refused by name before anything runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
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

TEST(DiffusionQueue, EachOutputIsOneCanvasAndTheBlocksEqualTransformers) {
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

// Every output's ids per request, its last output, the steps run and the most sequences in a
// decoder pass (the observer's StepStats).
struct Collected {
  std::map<int64_t, std::vector<int32_t>> ids;
  std::map<int64_t, RequestOutput> last;
  int64_t steps = 0, max_sequences = 0;
};

void run_to_end(DiffusionQueue& q, Collected& c) {
  while (q.has_work()) {
    for (auto& [id, o] : q.step()) {
      c.ids[id].insert(c.ids[id].end(), o.token_ids.begin(), o.token_ids.end());
      c.last[id] = o;
    }
    ++c.steps;
  }
}

DiffusionQueue observed_queue(Collected& c, size_t budget = 0, int64_t max_num_seqs = 8) {
  SchedulerConfig cfg;
  cfg.kv_cache_bytes = budget;
  cfg.max_num_seqs = max_num_seqs;
  SchedulerObserver obs;
  obs.on_step = [&c](const StepStats& st) { c.max_sequences = std::max(c.max_sequences, st.sequences); };
  return DiffusionQueue(*runtime().diffusion(), runtime().diffusion_schedule(), nullptr, runtime().max_model_len(), cfg,
                        obs);
}

// Three requests of different prompts, max_tokens and stops (the goldens' three cases; the third
// with its stop id and EOS honoured, a fourth sampled at temperature 1 with a seed), each run
// alone, then all together with two joining while the others are mid-canvas: each request's ids,
// finish reason and stop id are the same, the decoder passes ran the requests side by side
// (sequences per step), and together they took fewer steps than one after the other.
std::vector<RequestParams> mixed_requests() {
  std::vector<RequestParams> ps = {request_of(golden_case("two_canvases")),
                                   request_of(golden_case("three_canvases_long_prompt")),
                                   request_of(golden_case("stop_token"), false)};
  ps[0].max_tokens = 13;  // cut inside its second canvas
  RequestParams sampled = request_of(golden_case("two_canvases"));
  sampled.sampling.temperature = 1;
  sampled.sampling.seed = 11;
  sampled.max_tokens = 20;
  ps.push_back(sampled);
  return ps;
}

TEST(DiffusionQueue, RequestsRunTogetherAndEachEqualsItsRunAlone) {
  const std::vector<RequestParams> ps = mixed_requests();
  std::vector<Collected> alone(ps.size());
  int64_t steps_alone = 0;
  for (size_t i = 0; i < ps.size(); ++i) {
    DiffusionQueue q = observed_queue(alone[i]);
    q.add(static_cast<int64_t>(i), ps[i]);
    run_to_end(q, alone[i]);
    steps_alone += alone[i].steps;
    EXPECT_EQ(alone[i].max_sequences, 1);
  }
  // The goldens hold for the alone runs (transformers' generate), so the batched ones equal them too.
  EXPECT_EQ(alone[1].ids[1], golden_case("three_canvases_long_prompt")["output_ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(alone[2].last[2].finish_reason, "stop");
  EXPECT_EQ(alone[2].last[2].stop_token, 52);
  EXPECT_EQ(alone[0].ids[0].size(), 13u);

  Collected both;
  DiffusionQueue q = observed_queue(both);
  q.add(0, ps[0]);
  q.add(1, ps[1]);
  for (int k = 0; k < 3; ++k) {  // 0 and 1 mid-canvas when 2 and 3 join
    for (auto& [id, o] : q.step()) {
      both.ids[id].insert(both.ids[id].end(), o.token_ids.begin(), o.token_ids.end());
      both.last[id] = o;
    }
    ++both.steps;
  }
  EXPECT_EQ(q.num_running(), 2);
  q.add(2, ps[2]);
  q.add(3, ps[3]);
  run_to_end(q, both);
  for (size_t i = 0; i < ps.size(); ++i) {
    const int64_t id = static_cast<int64_t>(i);
    EXPECT_EQ(both.ids[id], alone[i].ids[id]) << "request " << i;
    EXPECT_TRUE(both.last[id].finished);
    EXPECT_EQ(both.last[id].finish_reason, alone[i].last[id].finish_reason) << i;
    EXPECT_EQ(both.last[id].stop_token, alone[i].last[id].stop_token) << i;
    EXPECT_EQ(both.last[id].completion_tokens, static_cast<int64_t>(alone[i].ids[id].size())) << i;
  }
  EXPECT_EQ(both.max_sequences, 4);
  EXPECT_LT(both.steps, steps_alone);
  std::printf("4 requests: %lld steps together, %lld one after the other\n", static_cast<long long>(both.steps),
              static_cast<long long>(steps_alone));
  EXPECT_EQ(q.kv_reserved_bytes(), 0u);
}

TEST(DiffusionQueue, MaxNumSeqsAndTheCacheBudgetMakeRequestsWaitNotFail) {
  const std::vector<RequestParams> ps = mixed_requests();
  Collected alone;
  {
    DiffusionQueue q = observed_queue(alone);
    for (size_t i = 0; i < ps.size(); ++i) q.add(static_cast<int64_t>(i), ps[i]);
    run_to_end(q, alone);
  }
  // At most 2 sequences at a time.
  {
    Collected c;
    DiffusionQueue q = observed_queue(c, 0, 2);
    for (size_t i = 0; i < ps.size(); ++i) q.add(static_cast<int64_t>(i), ps[i]);
    q.step();
    EXPECT_EQ(q.num_running(), 2);
    EXPECT_EQ(q.num_waiting(), 2);
    run_to_end(q, c);
    EXPECT_EQ(c.max_sequences, 2);
    for (int64_t id = 0; id < 4; ++id) EXPECT_EQ(c.ids[id], alone.ids[id]) << id;
  }
  // A budget that holds requests 0 and 1's caches but not a third beside them.
  {
    Collected c;
    const DiffusionQueue probe = make_queue();
    auto bytes = [&](const RequestParams& p) {
      return probe.sequence_bytes(static_cast<int64_t>(p.prompt.size()) + (p.max_tokens + 7) / 8 * 8);
    };
    const size_t budget = bytes(ps[0]) + bytes(ps[1]);
    DiffusionQueue q = observed_queue(c, budget);
    for (size_t i = 0; i < ps.size(); ++i) {
      q.check(ps[i]);
      q.add(static_cast<int64_t>(i), ps[i]);
    }
    q.step();
    EXPECT_EQ(q.num_running(), 2);
    EXPECT_EQ(q.num_waiting(), 2);
    EXPECT_EQ(q.kv_reserved_bytes(), budget);
    run_to_end(q, c);
    EXPECT_LE(c.max_sequences, 3);
    for (int64_t id = 0; id < 4; ++id) {
      EXPECT_EQ(c.ids[id], alone.ids[id]) << id;
      EXPECT_NE(c.last[id].finish_reason, "error") << id;
    }
  }
}

TEST(DiffusionQueue, ACancelAbortsAtTheNextStepAndTheOthersGoOn) {
  const json c = golden_case("two_canvases");
  DiffusionQueue q = make_queue();
  q.add(1, request_of(c));
  q.add(2, request_of(c));
  q.add(3, request_of(c));
  auto outs = q.step();  // a decoder pass of each; no canvas has ended
  EXPECT_TRUE(outs.empty());
  EXPECT_EQ(q.num_running(), 3);
  EXPECT_EQ(q.num_waiting(), 0);
  EXPECT_GT(q.kv_reserved_bytes(), 0u);
  q.cancel(1);
  q.cancel(3);
  outs = q.step();  // 1 and 3 abort, 2 goes on
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[0].first, 1);
  EXPECT_EQ(outs[0].second.finish_reason, "abort");
  EXPECT_EQ(outs[1].first, 3);
  EXPECT_EQ(outs[1].second.finish_reason, "abort");
  EXPECT_EQ(q.num_running(), 1);
  std::vector<int32_t> ids;
  while (q.has_work())
    for (auto& [id, o] : q.step()) {
      EXPECT_EQ(id, 2);
      ids.insert(ids.end(), o.token_ids.begin(), o.token_ids.end());
    }
  EXPECT_EQ(ids, c["output_ids"].get<std::vector<int32_t>>());
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
