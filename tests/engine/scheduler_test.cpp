// The continuous-batching scheduler against a fake model: decode first, the token budget,
// max_num_seqs, admission by KV memory (wait, never over budget), FCFS, cancellation freeing
// the slot at the next step, stop rules, and per-request results independent of the batch.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "engine/engine.h"
#include "engine/greedy_request.h"
#include "engine/scheduler.h"
#include "fake_step_model.h"

namespace fp4lm::engine::scheduler_test {
namespace {

using test::FakeStepModel;
using Outputs = std::vector<std::pair<int64_t, RequestOutput>>;


// Steps until nothing is left (bounded); returns every request's tokens and last output.
struct Drained {
  std::map<int64_t, std::vector<int32_t>> tokens;
  std::map<int64_t, RequestOutput> last;
  int steps = 0;
};
Drained drain(Scheduler& s, int max_steps = 1000) {
  Drained r;
  while (s.has_work() && r.steps < max_steps) {
    for (auto& [id, out] : s.step()) {
      auto& t = r.tokens[id];
      t.insert(t.end(), out.token_ids.begin(), out.token_ids.end());
      r.last[id] = out;
    }
    ++r.steps;
  }
  EXPECT_FALSE(s.has_work()) << "did not finish within " << max_steps << " steps";
  return r;
}

// The tokens a request gets alone in a scheduler (of a fake model) of its own.
std::vector<int32_t> tokens_alone(const RequestParams& p) {
  FakeStepModel m;
  Scheduler s(m, nullptr, {});
  s.add(1, p);
  return drain(s).tokens[1];
}

std::vector<int32_t> chain(int32_t last, int n, int64_t vocab = 32) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(last = FakeStepModel::successor(last, vocab));
  return out;
}

TEST(Scheduler, GreedyTokensFollowTheModelAndStopAtMaxTokens) {
  FakeStepModel m;
  Scheduler s(m, nullptr, {});
  s.add(1, greedy_request({1, 2}, 4));
  Drained r = drain(s);
  EXPECT_EQ(r.tokens[1], chain(2, 4));
  EXPECT_TRUE(r.last[1].finished);
  EXPECT_EQ(r.last[1].finish_reason, "length");
  EXPECT_EQ(r.last[1].prompt_tokens, 2);
  EXPECT_EQ(r.last[1].completion_tokens, 4);
  EXPECT_TRUE(m.history.empty()) << "finished sequences release their state";
  EXPECT_EQ(s.kv_reserved_bytes(), 0u);
}

// logit_bias +100 on a token makes it every greedy choice; -100 on the model's choice moves it.
TEST(Scheduler, LogitBiasIsAppliedBeforeSampling) {
  FakeStepModel m;
  Scheduler s(m, nullptr, {});
  RequestParams p = greedy_request({1, 2}, 3);
  p.logit_bias = {{7, 100.0f}};
  s.add(1, p);
  RequestParams q = greedy_request({1, 2}, 1);
  q.logit_bias = {{chain(2, 1)[0], -100.0f}};
  s.add(2, q);
  Drained r = drain(s);
  EXPECT_EQ(r.tokens[1], (std::vector<int32_t>{7, 7, 7}));
  ASSERT_EQ(r.tokens[2].size(), 1u);
  EXPECT_NE(r.tokens[2][0], chain(2, 1)[0]);
}

TEST(Scheduler, DecodesFirstThenPrefillsInChunksWithinTheTokenBudget) {
  FakeStepModel m;
  SchedulerConfig cfg;
  cfg.max_num_seqs = 4;
  cfg.max_num_batched_tokens = 8;
  Scheduler s(m, nullptr, cfg);
  s.add(1, greedy_request({1, 2, 3}, 10));
  s.step();
  EXPECT_EQ(s.last_batch(), (std::vector<std::pair<int64_t, int64_t>>{{1, 3}}));
  std::vector<int32_t> long_prompt(20, 5);
  s.add(2, greedy_request(long_prompt, 3));
  s.step();
  EXPECT_EQ(s.last_batch(), (std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 7}}));
  s.step();
  EXPECT_EQ(s.last_batch(), (std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 7}}));
  auto outs = s.step();  // request 2's prompt completes: it samples its first token
  EXPECT_EQ(s.last_batch(), (std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 6}}));
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(outs[1].second.token_ids, chain(5, 1));
  s.step();
  EXPECT_EQ(s.last_batch(), (std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 1}}));
  for (const auto& call : m.calls) {
    int64_t total = 0;
    for (auto& [seq, n] : call) total += n;
    EXPECT_LE(total, cfg.max_num_batched_tokens);
  }
}

TEST(Scheduler, RunsAtMostMaxNumSeqsAndAdmitsInArrivalOrder) {
  FakeStepModel m;
  SchedulerConfig cfg;
  cfg.max_num_seqs = 2;
  Scheduler s(m, nullptr, cfg);
  s.add(1, greedy_request({1}, 3));
  s.add(2, greedy_request({2}, 5));
  s.add(3, greedy_request({3}, 2));
  std::map<int64_t, std::vector<int32_t>> tokens;
  for (auto& [id, out] : s.step()) tokens[id] = out.token_ids;
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 1);
  EXPECT_EQ(s.last_batch(), (std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {2, 1}}));
  Drained r = drain(s);
  for (auto& [id, t] : r.tokens) tokens[id].insert(tokens[id].end(), t.begin(), t.end());
  EXPECT_EQ(tokens[1], chain(1, 3));
  EXPECT_EQ(tokens[2], chain(2, 5));
  EXPECT_EQ(tokens[3], chain(3, 2));
  for (const auto& call : m.calls) EXPECT_LE(call.size(), 2u);
}

TEST(Scheduler, AdmitsByKvMemoryAndNeverExceedsTheBudget) {
  FakeStepModel m;
  SchedulerConfig cfg;
  cfg.kv_cache_bytes = 1300;  // room for two reservations of 6 positions (600 bytes each)
  Scheduler s(m, nullptr, cfg);
  for (int64_t id = 1; id <= 3; ++id) s.add(id, greedy_request({static_cast<int32_t>(id), 1}, 4));
  s.step();
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 1) << "the third waits for memory";
  EXPECT_EQ(s.kv_reserved_bytes(), 1200u);
  int guard = 0;
  while (s.has_work() && guard++ < 100) {
    s.step();
    EXPECT_LE(s.kv_reserved_bytes(), cfg.kv_cache_bytes);
  }
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(s.kv_reserved_bytes(), 0u);
}

TEST(Scheduler, RefusesUpFrontWhatCanNeverRun) {
  FakeStepModel m;
  SchedulerConfig cfg;
  cfg.kv_cache_bytes = 1000;  // 10 positions
  Scheduler s(m, nullptr, cfg);
  try {
    s.check(greedy_request({1, 2, 3}, 8));
    FAIL() << "a reservation above the whole budget must be refused";
  } catch (const RequestError& e) {
    EXPECT_NE(std::string(e.what()).find("(kv_cache_memory)"), std::string::npos) << e.what();
    EXPECT_EQ(e.param, "max_tokens");
  }
  EXPECT_THROW(s.check(greedy_request(std::vector<int32_t>(60, 1), 5)), RequestError);  // 65 > max_model_len 64
  EXPECT_THROW(s.check(greedy_request(std::vector<int32_t>(64, 1), 1)), RequestError);  // no room left
  EXPECT_THROW(s.check(greedy_request({}, 1)), RequestError);
  EXPECT_THROW(s.check(greedy_request({40}, 1)), RequestError);  // id outside the vocabulary
  EXPECT_THROW(s.add(9, greedy_request({1}, 0)), RequestError);
  EXPECT_FALSE(s.has_work());
}

TEST(Scheduler, StrictFcfsTheQueueHeadBlocksLaterRequests) {
  FakeStepModel m;
  SchedulerConfig cfg;
  cfg.kv_cache_bytes = 2000;
  Scheduler s(m, nullptr, cfg);
  s.add(1, greedy_request({1}, 9));   // 1000 bytes
  s.add(2, greedy_request({2}, 14));  // 1500: must wait for 1
  s.add(3, greedy_request({3}, 1));   // 200: would fit, but arrives after 2
  s.step();
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_EQ(s.num_waiting(), 2);
  Drained r = drain(s);
  EXPECT_EQ(r.tokens[3], chain(3, 1));
  // Request 3 was first scheduled after request 2.
  size_t first2 = 0, first3 = 0;
  for (size_t i = 0; i < m.calls.size(); ++i)
    for (auto& [seq, n] : m.calls[i]) {
      (void)n;
      if (seq == 101 && !first2) first2 = i + 1;
      if (seq == 102 && !first3) first3 = i + 1;
    }
  EXPECT_GT(first2, 0u);
  EXPECT_GE(first3, first2);
}

TEST(Scheduler, CancellationFreesTheSlotAtTheNextStep) {
  FakeStepModel m;
  SchedulerConfig cfg;
  cfg.max_num_seqs = 1;
  Scheduler s(m, nullptr, cfg);
  s.add(1, greedy_request({1}, 50));
  s.add(2, greedy_request({2}, 2));
  s.step();
  s.step();
  EXPECT_EQ(m.history.size(), 1u);
  s.cancel(1);
  auto outs = s.step();
  ASSERT_GE(outs.size(), 1u);
  EXPECT_EQ(outs[0].first, 1);
  EXPECT_TRUE(outs[0].second.finished);
  EXPECT_EQ(outs[0].second.finish_reason, "abort");
  EXPECT_EQ(outs[0].second.completion_tokens, 2);
  EXPECT_EQ(s.last_batch(), (std::vector<std::pair<int64_t, int64_t>>{{2, 1}})) << "the freed slot is used at once";
  s.cancel(2);
  s.step();
  EXPECT_FALSE(s.has_work());
  EXPECT_TRUE(m.history.empty());
}

TEST(Scheduler, CancellingAWaitingRequestNeverAllocates) {
  FakeStepModel m;
  SchedulerConfig cfg;
  cfg.max_num_seqs = 1;
  Scheduler s(m, nullptr, cfg);
  s.add(1, greedy_request({1}, 5));
  s.add(2, greedy_request({2}, 5));
  s.step();
  s.cancel(2);
  auto outs = s.step();
  bool aborted = false;
  for (auto& [id, out] : outs) aborted |= id == 2 && out.finish_reason == "abort" && out.completion_tokens == 0;
  EXPECT_TRUE(aborted);
  Drained r = drain(s);
  EXPECT_EQ(r.last[1].completion_tokens, 5);
  EXPECT_EQ(m.next, 101) << "only request 1 ever got state";
}

TEST(Scheduler, StopsAtEosAndStopTokenIdsButNotBeforeMinTokens) {
  FakeStepModel m;
  m.eos = {7};  // successor(2) = 7
  Scheduler s(m, nullptr, {});
  RequestParams p = greedy_request({2}, 5);
  p.ignore_eos = false;
  s.add(1, p);
  p.min_tokens = 2;
  s.add(2, p);
  RequestParams q = greedy_request({1}, 5);  // 1 -> 4 -> 13
  q.stop_token_ids = {13};
  s.add(3, q);
  Drained r = drain(s);
  EXPECT_EQ(r.tokens[1], std::vector<int32_t>{7});
  EXPECT_EQ(r.last[1].finish_reason, "stop");
  EXPECT_FALSE(r.last[1].stop_token.has_value()) << "EOS is no stop_reason (as in vLLM)";
  // With min_tokens 2 the EOS is masked for the first two tokens: the next best (0) comes.
  ASSERT_GE(r.tokens[2].size(), 2u);
  EXPECT_EQ(r.tokens[2][0], 0);
  EXPECT_EQ(r.tokens[3], (std::vector<int32_t>{4, 13}));
  EXPECT_EQ(r.last[3].finish_reason, "stop");
  EXPECT_EQ(r.last[3].stop_token, 13);
}

TEST(Scheduler, ARequestsTokensDoNotDependOnTheRestOfTheBatch) {
  RequestParams sampled = greedy_request({3, 4, 5}, 12);
  sampled.sampling.temperature = 1.0;
  sampled.sampling.seed = 1234;
  const std::vector<int32_t> alone = tokens_alone(sampled);
  FakeStepModel m;
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 9;
  Scheduler s(m, nullptr, cfg);
  for (int64_t id = 1; id <= 6; ++id) s.add(id, greedy_request({static_cast<int32_t>(id), 9, 9, 9}, 3 + id));
  s.add(42, sampled);
  Drained r = drain(s);
  EXPECT_EQ(r.tokens[42], alone);
  for (int64_t id = 1; id <= 6; ++id) EXPECT_EQ(r.tokens[id], chain(9, static_cast<int>(3 + id)));
}

// Pipelined batches (a model with 3 forwards in flight): the running sequences go in groups of
// about a third, three forwards are in flight at once, and every request gets the tokens it gets
// alone; a single stream has one forward in flight, one pass per token.
TEST(Scheduler, PipelinedGroupsGiveEachRequestItsTokensAlone) {
  RequestParams sampled = greedy_request({3, 4, 5}, 12);
  sampled.sampling.temperature = 1.0;
  sampled.sampling.seed = 1234;
  const std::vector<int32_t> alone = tokens_alone(sampled);
  FakeStepModel m;
  m.depth = 3;
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 9;
  Scheduler s(m, nullptr, cfg);
  for (int64_t id = 1; id <= 8; ++id) s.add(id, greedy_request({static_cast<int32_t>(id), 9, 9, 9}, 3 + id));
  s.add(42, sampled);
  Drained r = drain(s);
  EXPECT_EQ(r.tokens[42], alone);
  for (int64_t id = 1; id <= 8; ++id) EXPECT_EQ(r.tokens[id], chain(9, static_cast<int>(3 + id)));
  EXPECT_EQ(m.in_flight_max, 3u);
  for (const auto& call : m.calls) EXPECT_LE(call.size(), 3u);  // 9 sequences in 3 groups
  EXPECT_TRUE(m.history.empty());
  EXPECT_TRUE(m.pending.empty());

  FakeStepModel one;
  one.depth = 3;
  Scheduler s1(one, nullptr, {});
  s1.add(1, greedy_request({1, 2}, 5));
  Drained r1 = drain(s1);
  EXPECT_EQ(r1.tokens[1], chain(2, 5));
  EXPECT_EQ(one.in_flight_max, 1u);
  EXPECT_EQ(r1.steps, 5);
}

// Pipelined: a failing forward fails its group's requests only; the group in flight beside it
// finishes; a request cancelled while its forward is in flight ends at the next step.
TEST(Scheduler, PipelinedFailureAndCancelTouchOnlyTheirGroup) {
  FakeStepModel m;
  m.depth = 2;
  Scheduler s(m, nullptr, {});
  for (int64_t id = 1; id <= 4; ++id) s.add(id, greedy_request({static_cast<int32_t>(id)}, 4));
  m.fail_next = true;  // the first forward collected: requests 1 and 2
  Outputs outs = s.step();
  ASSERT_EQ(outs.size(), 2u);
  for (const auto& [id, out] : outs) {
    EXPECT_TRUE(id == 1 || id == 2) << id;
    EXPECT_EQ(out.finish_reason, "error");
  }
  EXPECT_EQ(m.pending.size(), 1u);  // requests 3 and 4 still in flight
  s.cancel(4);
  outs = s.step();  // collects 3 and 4 (4 is in flight: not dropped before)
  ASSERT_EQ(outs.size(), 2u);
  Drained r = drain(s);
  EXPECT_EQ(r.last[4].finish_reason, "abort");
  EXPECT_EQ(r.last[3].finish_reason, "length");
  std::vector<int32_t> three = {outs[0].first == 3 ? outs[0].second.token_ids[0] : outs[1].second.token_ids[0]};
  three.insert(three.end(), r.tokens[3].begin(), r.tokens[3].end());
  EXPECT_EQ(three, chain(3, 4));
  EXPECT_TRUE(m.history.empty());
  EXPECT_TRUE(m.pending.empty());
}

TEST(Scheduler, AModelFailureFailsItsBatchAndTheSchedulerGoesOn) {
  FakeStepModel m;
  std::vector<RequestStats> finished;
  SchedulerObserver obs;
  obs.on_finished = [&](const RequestStats& st) { finished.push_back(st); };
  Scheduler s(m, nullptr, {}, obs);
  s.add(1, greedy_request({1}, 3));
  m.fail_next = true;
  auto outs = s.step();
  ASSERT_EQ(outs.size(), 1u);
  EXPECT_EQ(outs[0].second.finish_reason, "error");
  EXPECT_EQ(outs[0].second.error, "fake model failure");
  EXPECT_TRUE(m.history.empty());
  s.add(2, greedy_request({1}, 3));
  Drained r = drain(s);
  EXPECT_EQ(r.tokens[2], chain(1, 3));
  ASSERT_EQ(finished.size(), 2u);
  EXPECT_EQ(finished[1].finish_reason, "length");
  EXPECT_EQ(finished[1].generation_tokens, 3);
  EXPECT_EQ(finished[1].inter_token_s.size(), 2u);
}

// prompt + max_tokens is never computed where it could overflow: the largest values are refused
// with the context-length error, and nothing is queued or allocated.
TEST(Scheduler, HugeSizesAreRefusedWithoutOverflow) {
  FakeStepModel m;
  Scheduler s(m, nullptr, {});
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (int64_t mt : {kMax, kMax - 1, int64_t{64}, int64_t{1} << 62}) {
    try {
      s.check(greedy_request({1, 2}, mt));
      ADD_FAILURE() << mt;
    } catch (const RequestError& e) {
      EXPECT_EQ(e.param, "max_tokens") << mt;
      EXPECT_NE(std::string(e.what()).find(fmt::format("you requested {} tokens", static_cast<uint64_t>(mt) + 2)),
                std::string::npos)
          << e.what();
    }
  }
  RequestParams p = greedy_request({1}, 3);
  p.min_tokens = kMax;
  EXPECT_THROW(s.check(p), RequestError);
  p = greedy_request({1}, 3);
  p.logprobs = kMax;
  EXPECT_THROW(s.check(p), RequestError);
  p.logprobs = std::numeric_limits<int64_t>::min();
  EXPECT_THROW(s.check(p), RequestError);
  EXPECT_THROW(s.add(1, greedy_request({1}, kMax)), RequestError);
  EXPECT_FALSE(s.has_work());
  EXPECT_TRUE(m.capacity.empty());
  s.check(greedy_request({1}, 63));  // exactly the context: fine
}

// An exception while admitting a request (the sequence state cannot be allocated) fails that
// request alone, with the cause; the others in the same step run.
TEST(Scheduler, AFailingAllocationFailsOnlyThatRequest) {
  FakeStepModel m;
  Scheduler s(m, nullptr, {});
  s.add(1, greedy_request({1}, 3));
  s.add(2, greedy_request({2}, 3));
  m.fail_allocate = true;
  Drained r = drain(s);
  EXPECT_EQ(r.last[1].finish_reason, "error");
  EXPECT_EQ(r.last[1].error, "cannot allocate the sequence state: fake allocation failure");
  EXPECT_TRUE(r.tokens[1].empty());
  EXPECT_EQ(r.last[2].finish_reason, "length");
  EXPECT_EQ(r.tokens[2], chain(2, 3));
  EXPECT_EQ(s.kv_reserved_bytes(), 0u);
  EXPECT_TRUE(m.history.empty());
}

TEST(Scheduler, LogprobsComeFromTheRawLogits) {
  FakeStepModel m;
  Scheduler s(m, nullptr, {});
  RequestParams p = greedy_request({2}, 1);
  p.logprobs = 2;
  p.repetition_penalty = 2.0;  // changes the row sampled from, not the reported logprobs
  s.add(1, p);
  Drained r = drain(s);
  ASSERT_EQ(r.last[1].logprobs.size(), 1u);
  const TokenLogprob& lp = r.last[1].logprobs[0];
  EXPECT_EQ(lp.id, 7);
  ASSERT_EQ(lp.top.size(), 2u);
  EXPECT_EQ(lp.top[0].first, 7);
  EXPECT_EQ(lp.top[1].first, 0);
  // Raw row: 5 at id 7, -0.01 t elsewhere.
  double sum = 0;
  for (int t = 0; t < 32; ++t) sum += std::exp(t == 7 ? 5.0 : -0.01 * t);
  EXPECT_NEAR(lp.logprob, 5.0 - std::log(sum), 1e-5);
}

TEST(Engine, StreamsOutputsAndCancelsFromAnotherThread) {
  FakeStepModel m;
  SchedulerConfig cfg;
  cfg.max_num_seqs = 2;
  Engine e(m, nullptr, cfg);
  auto h = e.submit(greedy_request({1, 2}, 5));
  std::vector<int32_t> got;
  bool done = false;
  for (int i = 0; i < 200 && !done; ++i)
    for (auto& out : h->wait(std::chrono::milliseconds(50))) {
      got.insert(got.end(), out.token_ids.begin(), out.token_ids.end());
      done |= out.finished;
    }
  EXPECT_TRUE(done);
  EXPECT_EQ(got, chain(2, 5));
  EXPECT_THROW(e.submit(greedy_request({1}, 100)), RequestError);
  auto long_one = e.submit(greedy_request({1}, 60));
  long_one->cancel();
  std::string reason;
  for (int i = 0; i < 200 && reason.empty(); ++i)
    for (auto& out : long_one->wait(std::chrono::milliseconds(50)))
      if (out.finished) reason = out.finish_reason;
  EXPECT_TRUE(reason == "abort" || reason == "length") << reason;
}

// Whatever throws inside an engine step fails only the requests of that step, with the cause;
// the engine thread lives on and serves the next request.
TEST(Engine, AnExceptionInAStepFailsItsRequestsAndTheEngineGoesOn) {
  FakeStepModel m;
  Engine e(m, nullptr, {}, {});
  auto finish_of = [](const std::shared_ptr<RequestHandle>& h) {
    RequestOutput last;
    std::vector<int32_t> tokens;
    for (int i = 0; i < 200 && !last.finished; ++i)
      for (auto& out : h->wait(std::chrono::milliseconds(50))) {
        tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
        last = out;
      }
    return std::make_pair(last, tokens);
  };
  m.fail_allocate = true;
  auto [a, a_tokens] = finish_of(e.submit(greedy_request({1}, 3)));
  EXPECT_EQ(a.finish_reason, "error");
  EXPECT_EQ(a.error, "cannot allocate the sequence state: fake allocation failure");
  m.fail_next = true;
  auto [b, b_tokens] = finish_of(e.submit(greedy_request({1}, 3)));
  EXPECT_EQ(b.finish_reason, "error");
  EXPECT_EQ(b.error, "fake model failure");
  // A failure outside the model and the sampler: releasing the state of a request as it ends.
  // Cancelled, it ends in the scheduler's bookkeeping (the failure escapes the step and the
  // engine's last resort fails it); under load it may reach its length first (then the sampling
  // step fails it). Either way it is answered with the cause, never left waiting.
  m.fail_release = true;
  auto c = e.submit(greedy_request({1}, 60));
  RequestOutput c_out;  // admitted (it has state to release) before the cancel
  for (int i = 0; i < 200 && c_out.token_ids.empty() && !c_out.finished; ++i)
    for (auto& out : c->wait(std::chrono::milliseconds(50))) c_out = out;
  c->cancel();
  if (!c_out.finished) c_out = finish_of(c).first;
  EXPECT_EQ(c_out.finish_reason, "error");
  EXPECT_NE(c_out.error.find("fake release failure"), std::string::npos) << c_out.error;
  auto [d, d_tokens] = finish_of(e.submit(greedy_request({5}, 4)));
  EXPECT_EQ(d.finish_reason, "length");
  EXPECT_EQ(d_tokens, chain(5, 4));
}

TEST(Engine, AFailingFinishObserverFailsNoRequest) {
  FakeStepModel m;
  SchedulerObserver obs;
  obs.on_finished = [](const RequestStats&) { throw std::runtime_error("observer failure"); };
  Engine e(m, nullptr, {}, obs);
  for (int k = 0; k < 2; ++k) {
    auto h = e.submit(greedy_request({5}, 4));
    RequestOutput last;
    std::vector<int32_t> tokens;
    for (int i = 0; i < 200 && !last.finished; ++i)
      for (auto& out : h->wait(std::chrono::milliseconds(50))) {
        tokens.insert(tokens.end(), out.token_ids.begin(), out.token_ids.end());
        last = out;
      }
    EXPECT_EQ(last.finish_reason, "length");
    EXPECT_EQ(tokens, chain(5, 4));
  }
}

}  // namespace
}  // namespace fp4lm::engine::scheduler_test
