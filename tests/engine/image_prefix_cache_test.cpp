// The scheduler with image prompts (engine/prompt_images.h) on the fake model: prompt chunks carry
// each token's encoder row and 3-D positions at the right offsets (also when a cached prefix is
// skipped), two requests with the same image share the cached blocks over it, and another image
// of the same size (the same placeholder ids) never does.
#include <gtest/gtest.h>

#include "engine/greedy_request.h"
#include "engine/prompt_images.h"
#include "engine/scheduler.h"
#include "fake_step_model.h"

namespace fp4lm::engine::image_prefix_cache_test {
namespace {

constexpr int32_t kPad = 30;

// Records, per prompt chunk, its first row and first position (-1 / null when none).
class RecordingModel : public test::FakeStepModel {
 public:
  struct Seen {
    int64_t n;
    const float* first_embed;
    int64_t first_t;
  };
  std::vector<Seen> seen;
  void forward(std::span<const StepChunk> chunks) override {
    for (const StepChunk& c : chunks)
      if (c.embeds) seen.push_back({c.n, c.embeds[0], c.positions ? c.positions[0] : -1});
    FakeStepModel::forward(chunks);
  }
};

SchedulerConfig caching() {
  SchedulerConfig c;
  c.enable_prefix_caching = true;
  c.block_size = 4;
  c.max_num_batched_tokens = 64;
  return c;
}

// 4 text tokens, one 2 x 4 (merged) image of 8 placeholders, 3 text tokens: 15 tokens.
RequestParams image_request(uint64_t hash, float base) {
  RequestParams p = greedy_request({1, 2, 3, 4, kPad, 5, 6, 7}, 2);
  EncodedImage im;
  im.grid = {1, 4, 8};
  im.hash = hash;
  im.embeddings.rows = 8;
  im.embeddings.cols = 2;
  for (int i = 0; i < 16; ++i) im.embeddings.values.push_back(base + static_cast<float>(i));
  const int64_t count[] = {8};
  p.prompt = expand_image_placeholders(p.prompt, kPad, count);
  std::vector<EncodedImage> ims = {im};
  p.images = make_prompt_images(p.prompt, kPad, ims, 2, 2);
  return p;
}

RequestOutput run(Scheduler& s, int64_t id, RequestParams p) {
  s.add(id, std::move(p));
  RequestOutput last;
  for (int i = 0; i < 100 && s.has_work(); ++i)
    for (auto& [rid, out] : s.step()) last = out;
  EXPECT_FALSE(s.has_work());
  return last;
}

TEST(ImagePrefixCache, SameImageSharesTheBlocksAnotherImageOfTheSameSizeDoesNot) {
  RecordingModel m;
  Scheduler s(m, nullptr, caching());
  RequestParams a = image_request(1234, 100);
  const std::shared_ptr<const PromptImages> a_images = a.images;
  EXPECT_EQ(run(s, 1, std::move(a)).cached_tokens, 0);
  ASSERT_EQ(m.seen.size(), 1u);
  EXPECT_EQ(m.seen[0].n, 15);
  EXPECT_EQ(m.seen[0].first_embed, nullptr);  // token 0 is text
  EXPECT_EQ(m.seen[0].first_t, 0);

  // The same image again (its own copy, same content hash): the 12 tokens of 3 full blocks hit.
  RequestParams b = image_request(1234, 100);
  const std::shared_ptr<const PromptImages> b_images = b.images;
  EXPECT_EQ(run(s, 2, std::move(b)).cached_tokens, 12);
  ASSERT_EQ(m.seen.size(), 2u);
  EXPECT_EQ(m.seen[1].n, 3);  // only tokens 12..14 run, with their own rows and positions
  EXPECT_EQ(m.seen[1].first_embed, nullptr);
  EXPECT_EQ(m.seen[1].first_t, b_images->positions[3 * 12]);
  EXPECT_EQ(b_images->positions[3 * 12], 4 + 4 + 0);  // text resumes at 4 + max(2, 4)

  // Same size, same placeholder ids, other pixels: only the text block before it hits.
  RequestParams c = image_request(999, 500);
  EXPECT_EQ(c.prompt, image_request(1234, 100).prompt);
  const std::shared_ptr<const PromptImages> c_images = c.images;  // keeps the recorded row alive
  EXPECT_EQ(run(s, 3, std::move(c)).cached_tokens, 4);
  ASSERT_EQ(m.seen.size(), 3u);
  EXPECT_EQ(m.seen[2].n, 11);
  ASSERT_NE(m.seen[2].first_embed, nullptr);  // token 4: the image's first row
  EXPECT_EQ(m.seen[2].first_embed[0], 500.0f);
  EXPECT_EQ(m.seen[2].first_t, 4);
}

// Gemma 3's bidirectional image blocks: with a token budget that would end a prompt chunk inside
// a block, the chunk ends at the block's start, and the next one takes the block whole even past
// the budget; each chunk carries its tokens' block ends at the right offset.
TEST(ImagePrefixCache, Gemma3ChunksNeverEndInsideAnImageBlock) {
  class Chunks : public test::FakeStepModel {
   public:
    std::vector<std::pair<int64_t, int64_t>> seen;  // (n, bidir_end of the chunk's first token)
    void forward(std::span<const StepChunk> chunks) override {
      for (const StepChunk& c : chunks)
        if (c.bidir_end) seen.emplace_back(c.n, c.bidir_end[0]);
      FakeStepModel::forward(chunks);
    }
  } m;
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 6;
  cfg.max_num_seqs = 1;
  Scheduler s(m, nullptr, cfg);
  constexpr int32_t kSoft = 31;
  // 4 text tokens, a block of 8 soft tokens (positions 4..11), 3 text tokens.
  RequestParams p = greedy_request({1, 2, 3, 4, kSoft, kSoft, kSoft, kSoft, kSoft, kSoft, kSoft, kSoft, 5, 6, 7}, 1);
  EncodedImage im;
  im.hash = 99;
  im.embeddings.rows = 8;
  im.embeddings.cols = 2;
  im.embeddings.values.assign(16, 0.5f);
  std::vector<EncodedImage> ims = {im};
  p.images = make_gemma3_prompt_images(p.prompt, kSoft, ims, 8, 2);
  ASSERT_EQ(p.images->bidir_end[4], 11);
  ASSERT_EQ(p.images->bidir_end[11], 11);
  ASSERT_EQ(p.images->bidir_end[12], -1);
  EXPECT_TRUE(p.images->positions.empty());
  run(s, 1, std::move(p));
  // 6 would end at position 6 (inside the block): 4; then the block whole (8 > 6); then 3.
  ASSERT_EQ(m.seen.size(), 3u);
  EXPECT_EQ(m.seen[0], (std::pair<int64_t, int64_t>{4, -1}));
  EXPECT_EQ(m.seen[1], (std::pair<int64_t, int64_t>{8, 11}));
  EXPECT_EQ(m.seen[2], (std::pair<int64_t, int64_t>{3, -1}));
}

}  // namespace
}  // namespace fp4lm::engine::image_prefix_cache_test
