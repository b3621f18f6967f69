// The batched forward: chunks of several sequences at their own positions (some prefilling, some
// decoding, mixed in one call) give logits bit-identical to each sequence run alone, for every
// architecture, quantization, kernel backend available on this CPU (each forced in turn, the
// plain `reference` included) and thread count (the Qwen3.5-MoE hybrid too: its gated delta-net
// state per sequence). And the sequence store's bookkeeping.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "common/paths.h"
#include "core/error.h"
#include "core/log.h"
#include "core/thread_pool.h"
#include "kernels/registry.h"
#include "model/causal_lm.h"
#include "model/state/sequence_store.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::batched_forward_test {
namespace {

using quant::QuantAlgo;
using test::TempDir;

// Three sequences of different lengths (synthetic vocab 256).
const std::vector<std::vector<int32_t>> kSeqs = {
    {1, 200, 17, 5, 255, 40, 40, 3},
    {9, 9, 130, 64, 7, 81},
    {1, 2, 3, 250, 128, 77, 6, 91, 44, 12, 190, 33},
};

// One batched call: per sequence, its token range [begin, end) (empty = not in this call) and
// the logits it asks for.
struct Part {
  int seq;
  int64_t begin, end;
  LogitsMode mode;
};
// Mixed schedules: prefills of different lengths next to decode steps, a sequence joining late.
const std::vector<std::vector<Part>> kSchedule = {
    {{0, 0, 5, LogitsMode::all}, {2, 0, 9, LogitsMode::last}},
    {{2, 9, 10, LogitsMode::last}, {1, 0, 2, LogitsMode::all}, {0, 5, 6, LogitsMode::last}},
    {{0, 6, 7, LogitsMode::last}, {1, 2, 5, LogitsMode::last}, {2, 10, 12, LogitsMode::all}},
    {{1, 5, 6, LogitsMode::last}, {0, 7, 8, LogitsMode::all}},
};

// Logits [n, vocab] of a whole sequence run alone in one call.
std::vector<float> alone(const CausalLM& lm, const std::vector<int32_t>& toks) {
  SequenceState s = lm.new_sequence();
  std::vector<float> out(toks.size() * lm.vocab_size());
  lm.forward(s, toks.data(), static_cast<int64_t>(toks.size()), LogitsMode::all, out.data());
  return out;
}

// Each sequence alone, chunk by chunk as kSchedule cuts it (batches of one): logits [n, vocab]
// at every position some chunk asks for. With --a16-max-tokens the chunk sizes matter (a chunk
// of at most N tokens runs W4A4 layers at W4A16), so "alone" means the same chunks alone.
std::vector<std::vector<float>> alone_by_chunks(const CausalLM& lm) {
  const int64_t vocab = lm.vocab_size();
  std::vector<std::vector<float>> out;
  std::vector<SequenceState> states;
  for (const auto& seq : kSeqs) {
    out.emplace_back(seq.size() * vocab);
    states.push_back(lm.new_sequence());
  }
  for (const auto& step : kSchedule)
    for (const Part& p : step) {
      const int64_t first = p.mode == LogitsMode::all ? p.begin : p.end - 1;
      lm.forward(states[p.seq], kSeqs[p.seq].data() + p.begin, p.end - p.begin, p.mode,
                 out[p.seq].data() + first * vocab);
    }
  return out;
}

// Runs kSchedule on `lm` and checks every logits row it returns bit for bit against `want`.
void expect_schedule_matches(const CausalLM& lm, const std::vector<std::vector<float>>& want,
                             const std::string& what) {
  const int64_t vocab = lm.vocab_size();
  SequenceStore store(lm);
  std::vector<int64_t> ids;
  for (size_t i = 0; i < kSeqs.size(); ++i) ids.push_back(store.allocate());
  for (size_t step = 0; step < kSchedule.size(); ++step) {
    std::vector<SequenceChunk> batch;
    std::vector<std::vector<float>> outs;
    for (const Part& p : kSchedule[step]) {
      const int64_t n = p.end - p.begin;
      outs.emplace_back(static_cast<size_t>((p.mode == LogitsMode::all ? n : 1) * vocab));
    }
    for (size_t i = 0; i < kSchedule[step].size(); ++i) {
      const Part& p = kSchedule[step][i];
      SequenceState& s = store.get(ids[p.seq]);
      ASSERT_EQ(s.length(), p.begin) << what;
      batch.push_back({&s, kSeqs[p.seq].data() + p.begin, p.end - p.begin, p.mode, outs[i].data()});
    }
    lm.forward(batch);
    for (size_t i = 0; i < kSchedule[step].size(); ++i) {
      const Part& p = kSchedule[step][i];
      EXPECT_EQ(store.get(ids[p.seq]).length(), p.end) << what;
      const int64_t first = p.mode == LogitsMode::all ? p.begin : p.end - 1;
      for (int64_t pos = first; pos < p.end; ++pos) {
        const float* got = outs[i].data() + (pos - first) * vocab;
        const float* exp = want[p.seq].data() + pos * vocab;
        ASSERT_EQ(std::memcmp(got, exp, vocab * sizeof(float)), 0)
            << what << ": sequence " << p.seq << " position " << pos << " (step " << step << ")";
      }
    }
  }
}

struct Config {
  std::string name;
  EngineOptions opts;
};

// The oracle's choice, each available backend forced in turn (where it can run the model),
// at float32 and bfloat16 activations.
std::vector<Config> configs_for(QuantAlgo algo) {
  std::vector<Config> out;
  for (const char* dtype : {"float32", "bfloat16"}) {
    EngineOptions o;
    o.dtype = dtype;
    out.push_back({std::string(dtype) + " oracle", o});
    for (const kernels::Backend* b : kernels::all_backends()) {
      if (b->unavailable_reason && !b->unavailable_reason().empty()) continue;
      EngineOptions f = o;
      (b->kind == kernels::LayerKind::linear ? f.linear_backend : f.moe_backend) = b->name;
      const char* kind = b->kind == kernels::LayerKind::linear ? " forced linear " : " forced moe ";
      out.push_back({std::string(dtype) + kind + b->name, f});
    }
    EngineOptions kv = o;  // an FP8 KV cache (scales 1.0: these checkpoints have none)
    kv.kv_cache_dtype = "fp8";
    out.push_back({std::string(dtype) + " kv-cache-dtype fp8", kv});
    if (algo == QuantAlgo::NVFP4) {
      EngineOptions a = o;  // chunks of at most 2 tokens at W4A16, longer ones at W4A4
      a.a16_max_tokens = 2;
      out.push_back({std::string(dtype) + " a16-max-tokens 2", a});
      EngineOptions w = o;  // W4A4 checkpoint run through the W4A16 path
      w.override_activation_dtype = DType::BF16;
      out.push_back({std::string(dtype) + " override-activation-dtype bfloat16", w});
    }
  }
  return out;
}

class BatchedForwardTest : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    ThreadPool::set_global_threads(saved_threads_);
    if (!std::getenv("FP4LM_LOG_LEVEL")) set_log_level("warn");  // the test default
  }
  int saved_threads_ = ThreadPool::global().size();
};

TEST_P(BatchedForwardTest, MixedBatchesAreBitIdenticalToEachSequenceAlone) {
  if (!std::getenv("FP4LM_LOG_LEVEL")) set_log_level("error");  // forced 16-bit backends warn on W4A4 layers
  TempDir dir;
  int ran = 0;
  for (QuantAlgo algo : {QuantAlgo::None, QuantAlgo::W4A16_NVFP4, QuantAlgo::NVFP4}) {
    synth::SyntheticOptions s;
    s.architecture = GetParam();
    if (GetParam() == "NemotronHLatentMoE") {  // Nemotron 3 Super's layers: Mamba-2, latent MoE, attention
      s.architecture = "NemotronHForCausalLM";
      s.hybrid_pattern = "ME*E";
      s.moe_latent = 32;
    }
    s.algo = algo;
    s.quantize_lm_head = algo != QuantAlgo::None;
    s.seed = 3;
    const std::string d = (dir.path() / std::string(quant::algo_name(algo))).string();
    synth::write_synthetic_checkpoint(d, s);
    for (const Config& c : configs_for(algo)) {
      std::unique_ptr<CausalLM> lm, stepped;
      LoadOptions small;
      small.prefill_chunk = 4;  // batches split over several steps, a chunk across two
      try {
        lm = CausalLM::load(d, c.opts);
        stepped = CausalLM::load(d, c.opts, small);
      } catch (const Error& e) {
        // A forced backend that cannot run some layer of this checkpoint (e.g. a 4-bit backend
        // on the unquantized router): nothing to compare.
        continue;
      }
      for (int threads : {1, 2}) {
        ThreadPool::set_global_threads(threads);
        const std::string what = fmt::format("{} {} {} threads {}", GetParam(), quant::algo_name(algo), c.name, threads);
        // Without --a16-max-tokens chunking changes nothing: each sequence alone in one call.
        // A hybrid's gated delta-nets run a chunk's rows in the chunked form and single rows in
        // the recurrent one (equal to rounding, not bitwise): alone means the same chunks alone,
        // in steps of the same size (cut at block boundaries, not by the other sequences).
        const bool recurrent = lm->config().num_attention_layers() < lm->config().num_layers;
        std::vector<std::vector<float>> want;
        if (c.opts.a16_max_tokens == 0 && !recurrent)
          for (const auto& seq : kSeqs) want.push_back(alone(*lm, seq));
        else
          want = alone_by_chunks(*lm);
        expect_schedule_matches(*lm, want, what);
        expect_schedule_matches(*stepped, recurrent ? alone_by_chunks(*stepped) : want, what + " prefill_chunk 4");
        ++ran;
      }
      if (std::getenv("FP4LM_TEST_VERBOSE")) std::printf("ran %s %s\n", quant::algo_name(algo).data(), c.name.c_str());
    }
  }
  RecordProperty("configurations", ran);
  EXPECT_GE(ran, 3 * 2 * 2 * 2);  // at least the oracle and `reference` for every quantization
}

INSTANTIATE_TEST_SUITE_P(Every, BatchedForwardTest,
                         ::testing::Values("LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
                                           "Qwen3MoeForCausalLM", "MixtralForCausalLM", "Qwen2MoeForCausalLM",
                                           "MistralForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5MoeForCausalLM",
                                           "NemotronHForCausalLM", "NemotronHLatentMoE", "Glm4MoeForCausalLM",
                                           "DeepseekV3ForCausalLM", "MiniMaxM2ForCausalLM", "Llama4ForCausalLM"),
                         [](const auto& info) { return info.param; });

std::unique_ptr<CausalLM> small_model(TempDir& dir, QuantAlgo algo, EngineOptions o = {}, LoadOptions lo = {}) {
  synth::SyntheticOptions s;
  s.architecture = "Qwen3MoeForCausalLM";
  s.algo = algo;
  s.seed = 3;
  synth::write_synthetic_checkpoint(dir.path().string(), s);
  return CausalLM::load(dir.path().string(), o, lo);
}

TEST(SequenceStore, ReservesUpFrontAndReleasesById) {
  TempDir dir;
  LoadOptions lo;
  lo.max_model_len = 64;
  auto lm = small_model(dir, QuantAlgo::None, {}, lo);
  SequenceStore store(*lm);
  const size_t per_seq = store.bytes_for(0);
  // 2 layers x K/V x 2 KV heads x 64 positions x head_dim 16 x bf16
  EXPECT_EQ(per_seq, size_t{2} * 2 * 2 * 64 * 16 * 2);
  EXPECT_EQ(store.bytes_for(16), per_seq / 4);
  const int64_t a = store.allocate(), b = store.allocate(16);
  EXPECT_NE(a, b);
  EXPECT_EQ(store.reserved_bytes(), per_seq + per_seq / 4);
  EXPECT_EQ(store.get(a).capacity(), 64);
  EXPECT_EQ(store.get(b).capacity(), 16);
  EXPECT_EQ(store.get(a).id(), a);
  EXPECT_EQ(store.used_bytes(), 0u);
  std::vector<float> logits(lm->vocab_size());
  lm->forward(store.get(a), kSeqs[0].data(), 5, LogitsMode::last, logits.data());
  EXPECT_EQ(store.get(a).length(), 5);
  EXPECT_EQ(store.used_bytes(), 5 * store.get(a).bytes_per_position());
  store.release(a);
  EXPECT_FALSE(store.contains(a));
  EXPECT_EQ(store.reserved_bytes(), per_seq / 4);
  EXPECT_THROW(store.get(a), Error);
  EXPECT_THROW(store.release(a), Error);
  EXPECT_THROW(store.allocate(65), Error);  // beyond max_model_len
  const int64_t c = store.allocate();
  EXPECT_NE(c, a);  // ids are not reused
  EXPECT_EQ(store.size(), 2u);
}

TEST(BatchedForward, BadBatchesAreClearErrorsAndLeaveEveryStateAsItWas) {
  TempDir dir;
  LoadOptions lo;
  lo.max_model_len = 8;
  auto lm = small_model(dir, QuantAlgo::NVFP4, {}, lo);
  SequenceState a = lm->new_sequence(), b = lm->new_sequence();
  std::vector<float> la(lm->vocab_size()), lb(lm->vocab_size());
  lm->forward(a, kSeqs[2].data(), 6, LogitsMode::last, la.data());
  // b would pass its capacity: nothing runs, a stays at 6.
  std::vector<SequenceChunk> batch = {{&a, kSeqs[2].data() + 6, 1, LogitsMode::last, la.data()},
                                      {&b, kSeqs[2].data(), 9, LogitsMode::last, lb.data()}};
  EXPECT_THROW(lm->forward(batch), Error);
  EXPECT_EQ(a.length(), 6);
  EXPECT_EQ(b.length(), 0);
  // The same sequence twice.
  batch = {{&a, kSeqs[2].data() + 6, 1, LogitsMode::last, la.data()},
           {&a, kSeqs[2].data() + 7, 1, LogitsMode::last, la.data()}};
  EXPECT_THROW(lm->forward(batch), Error);
  // A bad token id in the second entry fails the call after nothing was committed.
  const int32_t bad = 999;
  batch = {{&a, kSeqs[2].data() + 6, 1, LogitsMode::last, la.data()}, {&b, &bad, 1, LogitsMode::last, lb.data()}};
  EXPECT_THROW(lm->forward(batch), Error);
  EXPECT_EQ(a.length(), 6);
  EXPECT_EQ(b.length(), 0);
  // Still usable: the next token gives what it gives alone.
  std::vector<float> want = alone(*lm, std::vector<int32_t>(kSeqs[2].begin(), kSeqs[2].begin() + 7));
  lm->forward(a, kSeqs[2].data() + 6, 1, LogitsMode::last, la.data());
  EXPECT_EQ(std::memcmp(la.data(), want.data() + 6 * lm->vocab_size(), la.size() * sizeof(float)), 0);
}

// --a16-max-tokens N is decided per sequence chunk: a decode step (1 token <= N) runs W4A4 layers
// at W4A16 whether it is alone, batched with other decodes (M = 2 > N) or next to a prefill.
TEST(BatchedForward, A16MaxTokensIsDecidedPerSequenceChunk) {
  // a, b prefilled (5 and 4 tokens), then one step: a and b decode, c prefills 6 tokens.
  auto step = [](const CausalLM& lm, bool together) {
    SequenceState a = lm.new_sequence(), b = lm.new_sequence(), c = lm.new_sequence();
    const int64_t vocab = lm.vocab_size();
    std::vector<float> la(vocab), lb(vocab), lc(vocab);
    lm.forward(a, kSeqs[0].data(), 5, LogitsMode::none, nullptr);
    lm.forward(b, kSeqs[1].data(), 4, LogitsMode::none, nullptr);
    std::vector<SequenceChunk> batch = {{&a, kSeqs[0].data() + 5, 1, LogitsMode::last, la.data()},
                                        {&c, kSeqs[2].data(), 6, LogitsMode::last, lc.data()},
                                        {&b, kSeqs[1].data() + 4, 1, LogitsMode::last, lb.data()}};
    if (together) {
      lm.forward(batch);
    } else {
      for (const SequenceChunk& ch : batch) lm.forward(std::span<const SequenceChunk>(&ch, 1));
    }
    std::vector<float> out = la;
    out.insert(out.end(), lb.begin(), lb.end());
    out.insert(out.end(), lc.begin(), lc.end());
    return out;
  };
  TempDir d0, d1;
  EngineOptions o;
  o.dtype = "bfloat16";
  auto off = small_model(d0, QuantAlgo::NVFP4, o);
  o.a16_max_tokens = 1;
  auto on = small_model(d1, QuantAlgo::NVFP4, o);
  const auto alone = step(*on, false);
  EXPECT_EQ(step(*on, true), alone);   // batch invariant with N > 0
  EXPECT_NE(alone, step(*off, false));  // and N = 1 really ran the decode rows at W4A16
  EXPECT_EQ(step(*off, true), step(*off, false));
}

}  // namespace
}  // namespace fp4lm::model::batched_forward_test
