// Pipeline stages (LoadOptions::first_layer / end_layer, StageLink): a model cut into stages and
// chained through an in-memory link gives logits bit-identical to the whole model, for a dense, a
// MoE and the Qwen3.5 hybrid (whose stages differ in row alignment), over batched calls whose
// prompts span several forward steps; a stage reads no tensor of another stage (it loads from a
// checkpoint that lacks them); the stages' weights add up to the whole model's.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <numeric>

#include "common/checkpoint_edit.h"
#include "common/paths.h"
#include "core/error.h"
#include "model/causal_lm.h"
#include "synth/synthetic_checkpoint.h"

namespace fp4lm::model::pipeline_stage_test {
namespace {

using test::TempDir;

// What one stage sends, the next receives (stages run one after another in this test).
struct Sent {
  std::vector<float> h;
  std::vector<uint8_t> kv;
};
class QueueLink final : public StageLink {
 public:
  std::deque<Sent>* in = nullptr;
  std::deque<Sent>* out = nullptr;
  void receive(float* h, int64_t rows, int64_t hidden, std::vector<uint8_t>& kv) override {
    ASSERT_FALSE(in->empty());
    ASSERT_EQ(in->front().h.size(), static_cast<size_t>(rows * hidden));
    std::copy(in->front().h.begin(), in->front().h.end(), h);
    kv = in->front().kv;
    in->pop_front();
  }
  void send(const float* h, int64_t rows, int64_t hidden, std::span<const uint8_t> kv) override {
    out->push_back({std::vector<float>(h, h + rows * hidden), std::vector<uint8_t>(kv.begin(), kv.end())});
  }
};

struct Chunk {
  int seq;
  std::vector<int32_t> tokens;
  LogitsMode mode;
};

std::vector<int32_t> ramp(int n, int mul) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * mul + 3) % 250 + 1;
  return t;
}

void check_stages(const std::string& arch, std::vector<std::pair<int64_t, int64_t>> cuts, int64_t layers = 4,
                  int64_t kv_shared_layers = 0, int64_t ple_dim = 0) {
  TempDir dir;
  synth::SyntheticOptions so;
  so.architecture = arch;
  so.layers = layers;
  so.kv_shared_layers = kv_shared_layers;
  so.ple_dim = ple_dim;
  synth::write_synthetic_checkpoint(dir.path().string(), so);
  LoadOptions lo;
  lo.prefill_chunk = 16;  // prompts of 40 tokens take several steps
  lo.max_model_len = 128;
  const auto whole = CausalLM::load(dir.path().string(), {}, lo);
  std::vector<std::unique_ptr<CausalLM>> stages;
  int64_t align = 1;
  for (auto [a, e] : cuts) {
    LoadOptions s = lo;
    s.first_layer = a;
    s.end_layer = e;
    stages.push_back(CausalLM::load(dir.path().string(), {}, s));
    align = std::lcm(align, stages.back()->state_layout().row_alignment());
  }
  EXPECT_EQ(align, whole->state_layout().row_alignment()) << arch;
  for (auto& s : stages) s->align_rows(align);
  EXPECT_TRUE(stages.front()->has_embedding());
  EXPECT_FALSE(stages.front()->has_lm_head());
  EXPECT_TRUE(stages.back()->has_lm_head());
  size_t sum = 0;
  for (auto& s : stages) sum += s->weight_bytes();
  EXPECT_EQ(sum, whole->weight_bytes()) << arch;

  const int64_t vocab = whole->vocab_size();
  const std::vector<std::vector<Chunk>> calls = {
      {{0, ramp(40, 7), LogitsMode::all}, {1, ramp(5, 3), LogitsMode::last}},
      {{1, {9}, LogitsMode::last}, {2, ramp(33, 11), LogitsMode::last}, {0, {4}, LogitsMode::all}},
      {{0, {17, 18}, LogitsMode::all}, {2, {5}, LogitsMode::last}, {1, {200}, LogitsMode::last}},
  };
  std::vector<SequenceState> ws, ss[4];
  for (int q = 0; q < 3; ++q) ws.push_back(whole->new_sequence());
  for (size_t k = 0; k < stages.size(); ++k)
    for (int q = 0; q < 3; ++q) ss[k].push_back(stages[k]->new_sequence());
  for (const auto& call : calls) {
    std::vector<std::vector<float>> want(call.size()), got(call.size());
    std::vector<SequenceChunk> wb;
    for (size_t i = 0; i < call.size(); ++i) {
      const size_t n = call[i].mode == LogitsMode::all ? call[i].tokens.size() : 1;
      want[i].assign(n * static_cast<size_t>(vocab), 0.f);
      got[i].assign(n * static_cast<size_t>(vocab), -1.f);
      wb.push_back({&ws[static_cast<size_t>(call[i].seq)], call[i].tokens.data(),
                    static_cast<int64_t>(call[i].tokens.size()), call[i].mode, want[i].data()});
    }
    whole->forward(wb);
    std::deque<Sent> q[5];
    for (size_t k = 0; k < stages.size(); ++k) {
      QueueLink link;
      link.in = &q[k];
      link.out = &q[k + 1];
      const bool last = k + 1 == stages.size();
      std::vector<SequenceChunk> b;
      for (size_t i = 0; i < call.size(); ++i)
        b.push_back({&ss[k][static_cast<size_t>(call[i].seq)], call[i].tokens.data(),
                     static_cast<int64_t>(call[i].tokens.size()), last ? call[i].mode : LogitsMode::none,
                     last ? got[i].data() : nullptr});
      stages[k]->forward(b, &link);
      EXPECT_TRUE(q[k].empty()) << "stage " << k << " left steps unread";
    }
    for (size_t i = 0; i < call.size(); ++i)
      ASSERT_EQ(0, std::memcmp(want[i].data(), got[i].data(), want[i].size() * sizeof(float)))
          << arch << ": chunk " << i << " of a call differs through the stages";
  }
}

TEST(PipelineStage, DenseStagesMatchTheWholeModelBitForBit) {
  check_stages("LlamaForCausalLM", {{0, 1}, {1, 3}, {3, 4}});
}

TEST(PipelineStage, MoeStagesMatchTheWholeModelBitForBit) {
  check_stages("Qwen3MoeForCausalLM", {{0, 2}, {2, 4}});
}

TEST(PipelineStage, HybridStagesMatchTheWholeModelBitForBit) {
  // Layers 1 and 3 are full attention, 0 and 2 the gated delta-net: stage [3, 4) alone has no
  // row alignment of its own and must cut steps where the others do.
  check_stages("Qwen3_5ForCausalLM", {{0, 1}, {1, 3}, {3, 4}});
}

// DeepSeek Sparse Attention (index_topk 4, prompts past it): GLM-5's shared layers 1 and 3 reuse
// the selection of layers 0 and 2, which the stage before sends with the residual stream.
TEST(PipelineStage, SparseAttentionSelectionsAcrossStagesMatchTheWholeModelBitForBit) {
  check_stages("DeepseekV32ForCausalLM", {{0, 2}, {2, 4}});
  check_stages("GlmMoeDsaForCausalLM", {{0, 1}, {1, 3}, {3, 4}});
}

// Gemma 4 with num_kv_shared_layers 2 of 6 layers (sliding, full, sliding, full, sliding, full):
// layer 4 attends to layer 2's K/V (a sliding ring), layer 5 to layer 3's. Cut between them the
// stage that stores the K/V sends its rows on with the residual stream: [0, 3) sends layer 2's
// to [3, 6); in four stages [1, 3) sends layer 2's, [3, 4) passes it on with its own layer 3's.
TEST(PipelineStage, SharedKvAcrossStagesMatchesTheWholeModelBitForBit) {
  check_stages("Gemma4ForCausalLM", {{0, 3}, {3, 6}}, 6, 2);
  check_stages("Gemma4ForCausalLM", {{0, 1}, {1, 3}, {3, 4}, {4, 6}}, 6, 2);
}

// Gemma 4 with per-layer input embeddings (the E2B / E4B form): layer 0 computes every layer's
// input from the tokens and the embedding; the stage holding it sends them on with the residual
// stream, a middle stage passes them on, and with shared K/V crossing the same cuts.
TEST(PipelineStage, PerLayerInputsAcrossStagesMatchTheWholeModelBitForBit) {
  check_stages("Gemma4ForCausalLM", {{0, 2}, {2, 4}}, 4, 0, 16);
  check_stages("Gemma4ForCausalLM", {{0, 1}, {1, 3}, {3, 4}, {4, 6}}, 6, 2, 16);
}

TEST(PipelineStage, PerLayerInputsOfAnotherSizeAreRefused) {
  TempDir dir;
  synth::SyntheticOptions so;
  so.architecture = "Gemma4ForCausalLM";
  so.layers = 4;
  so.ple_dim = 16;
  synth::write_synthetic_checkpoint(dir.path().string(), so);
  LoadOptions lo;
  lo.first_layer = 2;
  const auto lm = CausalLM::load(dir.path().string(), {}, lo);
  // A message with the K/V part empty and per-layer inputs for 1 row where the step has 2.
  struct OneRowLink final : StageLink {
    void receive(float* h, int64_t rows, int64_t hidden, std::vector<uint8_t>& extra) override {
      std::fill(h, h + rows * hidden, 0.5f);
      std::vector<float> ple(4 * 16, 0.25f);  // 1 row × 4 layers × 16
      const uint64_t kv = 0, n = ple.size() * sizeof(float);
      auto put = [&](const void* p, size_t b) {
        extra.insert(extra.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + b);
      };
      put(&kv, sizeof kv);
      put(&n, sizeof n);
      put(ple.data(), n);
    }
    void send(const float*, int64_t, int64_t, std::span<const uint8_t>) override {}
  } link;
  SequenceState s = lm->new_sequence();
  const int32_t toks[2] = {5, 6};
  std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
  SequenceChunk c{&s, toks, 2, LogitsMode::last, logits.data()};
  try {
    lm->forward(std::span<const SequenceChunk>(&c, 1), &link);
    ADD_FAILURE() << "a short per-layer-input message was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sent 256 bytes of Gemma 4's per-layer inputs, 2 rows × 4 layers × 16 need 512"),
              std::string::npos)
        << e.what();
  }
}

TEST(PipelineStage, SharedKvCrossingACutIsDeclaredOnBothSides) {
  TempDir dir;
  synth::SyntheticOptions so;
  so.architecture = "Gemma4ForCausalLM";
  so.layers = 6;
  so.kv_shared_layers = 2;
  synth::write_synthetic_checkpoint(dir.path().string(), so);
  LoadOptions lo;
  lo.end_layer = 3;
  const auto a = CausalLM::load(dir.path().string(), {}, lo);
  EXPECT_EQ(a->stage_kv().received(), std::vector<int64_t>{});
  EXPECT_EQ(a->stage_kv().sent(), std::vector<int64_t>{2});
  lo.first_layer = 3;
  lo.end_layer = 4;
  const auto b = CausalLM::load(dir.path().string(), {}, lo);
  EXPECT_EQ(b->stage_kv().received(), std::vector<int64_t>{2});
  EXPECT_EQ(b->stage_kv().sent(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b->state_layout().kv_slots().size(), 1u);  // layer 3's own; layer 2's only passes through
  lo.first_layer = 4;
  lo.end_layer = -1;
  const auto c = CausalLM::load(dir.path().string(), {}, lo);
  EXPECT_EQ(c->stage_kv().received(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(c->stage_kv().sent(), std::vector<int64_t>{});
  // The readers' copies of layers 2 and 3 (a sliding ring and a full slot), nothing of its own.
  ASSERT_EQ(c->state_layout().kv_slots().size(), 2u);
  EXPECT_GT(c->state_layout().kv_slots()[0].window, 0);
  EXPECT_EQ(c->state_layout().kv_slots()[1].window, 0);
}

TEST(PipelineStage, StageReadsOnlyItsOwnTensors) {
  TempDir dir;
  synth::SyntheticOptions so;
  so.architecture = "LlamaForCausalLM";
  so.layers = 4;
  synth::write_synthetic_checkpoint(dir.path().string(), so);
  // Keep only layers 2 and 3, the final norm and lm_head: the stage [2, 4) still loads.
  test::edit_tensors(dir.path(), [](test::EditedTensor& t) {
    return t.name.rfind("model.layers.2.", 0) == 0 || t.name.rfind("model.layers.3.", 0) == 0 ||
           t.name.rfind("lm_head", 0) == 0 || t.name == "model.norm.weight";
  });
  LoadOptions lo;
  lo.first_layer = 2;
  const auto lm = CausalLM::load(dir.path().string(), {}, lo);
  EXPECT_EQ(lm->first_layer(), 2);
  EXPECT_EQ(lm->end_layer(), 4);
  EXPECT_FALSE(lm->has_embedding());
  // And without its link a stage refuses to run.
  SequenceState s = lm->new_sequence();
  const int32_t tok = 5;
  std::vector<float> logits(static_cast<size_t>(lm->vocab_size()));
  EXPECT_THROW(lm->forward(s, &tok, 1, LogitsMode::last, logits.data()), Error);
  // A range outside the model is an error naming config.json.
  lo.first_layer = 3;
  lo.end_layer = 9;
  EXPECT_THROW(CausalLM::load(dir.path().string(), {}, lo), Error);
}

}  // namespace
}  // namespace fp4lm::model::pipeline_stage_test
