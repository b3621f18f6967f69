// The language-model side of an image prompt on a tiny Qwen3.5 (dense and MoE): the placeholder
// rows replaced by an encoder's rows (SequenceChunk::embeds) and the 3-D M-RoPE positions
// (SequenceChunk::positions, model/layers/mrope_positions.h) against the float64 forward of
// tests/reference/hybrid_reference.h given the same rows and positions; decoding after the prompt
// continues at length + rope_delta; a batch or chunked prefill changes nothing.
#include <gtest/gtest.h>

#include <random>

#include "common/paths.h"
#include "model/causal_lm.h"
#include "reference/hybrid_reference.h"
#include "model/arch/arch.h"
#include "model/layers/mrope_positions.h"
#include "engine/test_image_encoder.h"

namespace fp4lm::model::image_prompt_test {
namespace {

using test::TempDir;
using namespace hybrid_ref;

constexpr int32_t kImagePad = 90;  // the placeholder id (any id: its embedding is replaced)

struct ImagePrompt {
  std::vector<int32_t> tokens;
  std::vector<ImageRun> runs;
  std::vector<float> rows;  // the encoder's rows, [image tokens, hidden]
  MropePositions pos;
  std::vector<const float*> embeds;  // per token
};

// Text, a (1, 4, 6) image (2 x 3 merged tokens), text, a (1, 2, 4) image (1 x 2), text.
ImagePrompt make_prompt(int64_t hidden, uint64_t seed) {
  ImagePrompt p;
  auto text = [&](std::initializer_list<int32_t> t) { p.tokens.insert(p.tokens.end(), t); };
  auto image = [&](vision::GridThw g) {
    p.runs.push_back({static_cast<int64_t>(p.tokens.size()), g});
    p.tokens.insert(p.tokens.end(), static_cast<size_t>(image_run_tokens(g, 2)), kImagePad);
  };
  text({1, 17, 5});
  image({1, 4, 6});
  text({40, 3});
  image({1, 2, 4});
  text({62, 11, 80});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t image_tokens = 6 + 2;
  p.rows.resize(static_cast<size_t>(image_tokens * hidden));
  for (float& v : p.rows) v = nd(rng);
  p.pos = mrope_positions(static_cast<int64_t>(p.tokens.size()), p.runs, 2);
  p.embeds.assign(p.tokens.size(), nullptr);
  int64_t r = 0;
  for (size_t t = 0; t < p.tokens.size(); ++t)
    if (p.tokens[t] == kImagePad) p.embeds[t] = p.rows.data() + (r++) * hidden;
  return p;
}

std::map<size_t, Vec> reference_rows(const ImagePrompt& p, int64_t hidden) {
  std::map<size_t, Vec> m;
  for (size_t t = 0; t < p.embeds.size(); ++t)
    if (p.embeds[t]) m[t] = Vec(p.embeds[t], p.embeds[t] + hidden);
  return m;
}

std::vector<Thw> reference_positions(const ImagePrompt& p, size_t extra) {
  std::vector<Thw> out;
  for (size_t t = 0; t < p.tokens.size(); ++t)
    out.push_back({p.pos.thw[3 * t], p.pos.thw[3 * t + 1], p.pos.thw[3 * t + 2]});
  for (size_t k = 0; k < extra; ++k) {  // decoded tokens: index + delta on all three axes
    const int64_t q = static_cast<int64_t>(p.tokens.size() + k) + p.pos.delta;
    out.push_back({q, q, q});
  }
  return out;
}

std::vector<float> image_logits(const CausalLM& lm, SequenceState& s, const ImagePrompt& p) {
  const int64_t n = static_cast<int64_t>(p.tokens.size());
  std::vector<float> out(static_cast<size_t>(n * lm.vocab_size()));
  SequenceChunk c{&s, p.tokens.data(), n, LogitsMode::all, out.data()};
  c.embeds = p.embeds.data();
  c.positions = p.pos.thw.data();
  lm.forward(std::span<const SequenceChunk>(&c, 1));
  return out;
}

class ImagePromptFamily : public ::testing::TestWithParam<Family> {};

TEST_P(ImagePromptFamily, SubstitutedRowsAndThreeDimensionalPositionsMatchFloat64Reference) {
  TempDir dir;
  const Hybrid m = make_hybrid(2, 23, GetParam());
  write_hybrid(m, dir.path(), /*vl=*/true);
  auto lm = CausalLM::load(dir.path().string(), f32());
  const ImagePrompt p = make_prompt(m.hidden, 7);
  ASSERT_LT(p.pos.delta, 0);  // the images take fewer positions than tokens
  SequenceState s = lm->new_sequence();
  const auto got = image_logits(*lm, s, p);
  const auto rows = reference_rows(p, m.hidden);
  const auto pos = reference_positions(p, 2);
  const std::vector<Thw> prompt_pos(pos.begin(), pos.begin() + static_cast<std::ptrdiff_t>(p.tokens.size()));
  EXPECT_LT(max_rel_diff(got, reference(m, p.tokens, &rows, &prompt_pos)), 2e-5);
  // The check can fail: the same rows at 1-D positions, or the positions without the rows, differ.
  EXPECT_GT(max_rel_diff(got, reference(m, p.tokens, &rows)), 1e-3);
  EXPECT_GT(max_rel_diff(got, reference(m, p.tokens, nullptr, &prompt_pos)), 1e-3);
  EXPECT_EQ(s.rope_delta(), p.pos.delta);

  // Decoding two tokens continues at length + delta.
  const int64_t vocab = lm->vocab_size();
  std::vector<int32_t> all = p.tokens;
  std::vector<float> step(static_cast<size_t>(vocab));
  for (int32_t t : {29, 7}) {
    all.push_back(t);
    lm->forward(s, &t, 1, LogitsMode::last, step.data());
  }
  const auto want = reference(m, all, &rows, &pos);
  EXPECT_LT(max_rel_diff(step, {want.back()}), 2e-5);
}

TEST_P(ImagePromptFamily, BatchesAndPrefillChunksChangeNothing) {
  TempDir dir;
  const Hybrid m = make_hybrid(2, 23, GetParam());
  write_hybrid(m, dir.path(), /*vl=*/true);
  auto lm = CausalLM::load(dir.path().string(), f32());
  const ImagePrompt p = make_prompt(m.hidden, 9);
  SequenceState alone = lm->new_sequence();
  const auto once = image_logits(*lm, alone, p);

  // Beside a text sequence and a second image sequence in one batch: bit for bit.
  const int64_t vocab = lm->vocab_size(), n = static_cast<int64_t>(p.tokens.size());
  const ImagePrompt other = make_prompt(m.hidden, 10);
  SequenceState a = lm->new_sequence(), b = lm->new_sequence(), c = lm->new_sequence();
  std::vector<float> la(once.size()), lb(kTokens.size() * static_cast<size_t>(vocab)), lc(once.size());
  std::vector<SequenceChunk> batch = {{&b, kTokens.data(), static_cast<int64_t>(kTokens.size()), LogitsMode::all, lb.data()},
                                      {&a, p.tokens.data(), n, LogitsMode::all, la.data()},
                                      {&c, other.tokens.data(), n, LogitsMode::all, lc.data()}};
  batch[1].embeds = p.embeds.data();
  batch[1].positions = p.pos.thw.data();
  batch[2].embeds = other.embeds.data();
  batch[2].positions = other.pos.thw.data();
  lm->forward(batch);
  EXPECT_TRUE(bit_identical(la, once));
  EXPECT_FALSE(bit_identical(lc, once));  // another image, other logits
  EXPECT_EQ(b.rope_delta(), 0);

  // Prefill in steps of 3 rows; and the prompt split over two forward calls at an image's middle.
  LoadOptions lo;
  lo.prefill_chunk = 3;
  auto chunked = CausalLM::load(dir.path().string(), f32(), lo);
  SequenceState s3 = chunked->new_sequence();
  const auto got3 = image_logits(*chunked, s3, p);
  for (size_t i = 0; i < got3.size(); ++i) ASSERT_NEAR(got3[i], once[i], 1e-5) << i;
  SequenceState two = lm->new_sequence();
  const int64_t cut = 6;
  std::vector<float> first(static_cast<size_t>(cut * vocab)), rest(static_cast<size_t>((n - cut) * vocab));
  SequenceChunk c1{&two, p.tokens.data(), cut, LogitsMode::all, first.data()};
  c1.embeds = p.embeds.data();
  c1.positions = p.pos.thw.data();
  lm->forward(std::span<const SequenceChunk>(&c1, 1));
  SequenceChunk c2{&two, p.tokens.data() + cut, n - cut, LogitsMode::all, rest.data()};
  c2.embeds = p.embeds.data() + cut;
  c2.positions = p.pos.thw.data() + 3 * cut;
  lm->forward(std::span<const SequenceChunk>(&c2, 1));
  for (size_t i = 0; i < rest.size(); ++i)
    ASSERT_NEAR(rest[i], once[static_cast<size_t>(cut * vocab) + i], 1e-5) << i;
  EXPECT_EQ(two.rope_delta(), p.pos.delta);
}

// Qwen3.5 with a stand-in tower: every call delegates to the registered Qwen3.5 ArchDef except
// load_image_encoder, as the real tower's override will be.
class VisionQwen35 : public ArchDef {
 public:
  const ArchDef& b = *find_arch("Qwen3_5ForCausalLM");
  std::string_view hf_name() const override { return "TestVisionQwen3_5ForCausalLM"; }
  void fill_config_defaults(nlohmann::json& j) const override { b.fill_config_defaults(j); }
  std::optional<Wrapper> wrapper() const override { return b.wrapper(); }
  void parse_config(const ConfigReader& r, ModelConfig& c) const override { b.parse_config(r, c); }
  void plan_layer(const ModelConfig& c, int64_t i, std::vector<LayerSpec>& out) const override {
    b.plan_layer(c, i, out);
  }
  std::vector<LayerParam> layer_params(const ModelConfig& c, int64_t i) const override { return b.layer_params(c, i); }
  std::unique_ptr<DecoderLayer> make_layer(const LayerBuild& lb, int64_t i) const override {
    return b.make_layer(lb, i);
  }
  std::unique_ptr<Mixer> make_mixer(const LayerBuild& lb, int64_t i) const override { return b.make_mixer(lb, i); }
  int64_t kv_source(const ModelConfig& c, int64_t i) const override { return b.kv_source(c, i); }
  std::unique_ptr<FeedForward> make_ffn(ModelLoader& l, int64_t i) const override { return b.make_ffn(l, i); }
  std::vector<std::string> default_exclusions(const ModelConfig& c) const override { return b.default_exclusions(c); }
  std::vector<std::string> float32_tensors(const ModelConfig& c) const override { return b.float32_tensors(c); }
  bool lists_embedding_as_excluded() const override { return b.lists_embedding_as_excluded(); }
  std::unique_ptr<ImageEncoder> load_image_encoder(ModelLoader&) const override {
    ++loads;
    return std::make_unique<test::ProjectionImageEncoder>(32, 3 * 2 * 16 * 16);
  }
  void synthetic_config(const model::SampleShape& o, nlohmann::json& c) const override { b.synthetic_config(o, c); }
  mutable int loads = 0;
};

TEST(ImageEncoderSeam, CausalLmLoadsTheArchitecturesTowerOnceAndTextOnlyModelsHaveNone) {
  TempDir dir;
  Hybrid m = make_hybrid(2, 23, Family::qwen3_5);
  write_hybrid(m, dir.path());
  EXPECT_EQ(CausalLM::load(dir.path().string(), f32())->image_encoder(), nullptr);
  const VisionQwen35 arch;
  const ArchRegistration reg(arch);
  m.config["architectures"] = {"TestVisionQwen3_5ForCausalLM"};
  write_hybrid(m, dir.path());
  auto lm = CausalLM::load(dir.path().string(), f32());
  ASSERT_NE(lm->image_encoder(), nullptr);
  EXPECT_EQ(arch.loads, 1);
  EXPECT_EQ(lm->image_encoder()->hidden_size(), lm->config().hidden_size);
  LoadOptions stage;
  stage.end_layer = 2;  // a pipeline stage never loads it
  EXPECT_EQ(CausalLM::load(dir.path().string(), f32(), stage)->image_encoder(), nullptr);
  EXPECT_EQ(arch.loads, 1);
}

INSTANTIATE_TEST_SUITE_P(DenseAndMoe, ImagePromptFamily, ::testing::Values(Family::qwen3_5, Family::qwen3_5_moe),
                         [](const auto& info) { return info.param == Family::qwen3_5 ? "dense" : "moe"; });

}  // namespace
}  // namespace fp4lm::model::image_prompt_test
