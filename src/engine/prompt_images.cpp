#include "engine/prompt_images.h"

#include <cstring>
#include <string>

#include <fmt/format.h>

#include "engine/request_error.h"

namespace fp4lm::engine {

namespace {
uint64_t fnv1a(uint64_t h, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}
uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

uint64_t image_content_hash(const vision::QwenVlPixels& px) {
  uint64_t h = 14695981039346656037ull;
  const int64_t dims[5] = {px.grid.t, px.grid.h, px.grid.w, px.rows, px.cols};
  h = fnv1a(h, dims, sizeof dims);
  return fnv1a(h, px.pixel_values.data(), px.pixel_values.size() * sizeof(float));
}

uint64_t image_content_hash(const vision::Gemma3Pixels& px) {
  uint64_t h = 14695981039346656037ull;
  const int64_t dims[4] = {px.images, px.num_crops, px.height, px.width};
  h = fnv1a(h, dims, sizeof dims);
  return fnv1a(h, px.pixel_values.data(), px.pixel_values.size() * sizeof(float));
}

uint64_t image_content_hash(const vision::Gemma4Pixels& px) {
  uint64_t h = 14695981039346656037ull;
  const int64_t dims[5] = {px.height, px.width, px.rows, px.cols, px.soft_tokens};
  h = fnv1a(h, dims, sizeof dims);
  h = fnv1a(h, px.position_ids.data(), px.position_ids.size() * sizeof(int64_t));
  return fnv1a(h, px.pixel_values.data(), px.pixel_values.size() * sizeof(float));
}

std::vector<int32_t> expand_image_placeholders(std::span<const int32_t> prompt, int32_t pad,
                                               std::span<const int64_t> counts) {
  std::vector<int32_t> out;
  size_t k = 0;
  for (size_t i = 0; i < prompt.size(); ++i) {
    if (prompt[i] != pad) {
      out.push_back(prompt[i]);
      continue;
    }
    if (i + 1 < prompt.size() && prompt[i + 1] == pad)
      throw RequestError(fmt::format("the prompt already holds a run of image placeholder tokens (id {}) at token {}; "
                                     "an image part is one placeholder, expanded by fp4lm",
                                     pad, i));
    if (k < counts.size()) out.insert(out.end(), static_cast<size_t>(counts[k]), pad);
    ++k;
  }
  if (k != counts.size())
    throw RequestError(fmt::format("the prompt has {} image placeholder(s) (token id {}) for {} image(s); each image "
                                   "needs exactly one (an image content part or <|vision_start|><|image_pad|>"
                                   "<|vision_end|> in a raw prompt)",
                                   k, pad, counts.size()));
  return out;
}

std::shared_ptr<const PromptImages> make_prompt_images(std::span<const int32_t> prompt, int32_t pad,
                                                       std::vector<EncodedImage> images, int64_t merge,
                                                       int64_t hidden) {
  return make_qwen_prompt_media(prompt, pad, std::move(images), std::nullopt, {}, merge, hidden);
}

std::shared_ptr<const PromptImages> make_qwen_prompt_media(std::span<const int32_t> prompt, int32_t image_pad,
                                                           std::vector<EncodedImage> images,
                                                           std::optional<int32_t> video_pad,
                                                           std::vector<EncodedImage> videos, int64_t merge,
                                                           int64_t hidden) {
  auto p = std::make_shared<PromptImages>();
  p->count = static_cast<int64_t>(images.size() + videos.size());
  // One block per image, one per frame group of a video (Qwen3-VL writes each group as its own
  // run of video pads, timestamps between them): its grid, the item's rows it takes, and the hash.
  struct Block {
    vision::GridThw grid;
    const EncodedImage* item = nullptr;
    int64_t first_row = 0;  // in the item's rows
    std::string name;       // "image 2", "video 1"
  };
  std::vector<Block> blocks;
  // DeepStack levels ride along each encoder row (PromptImages::row_stride); every item has as many.
  const EncodedImage* first = !images.empty() ? &images[0] : !videos.empty() ? &videos[0] : nullptr;
  const size_t levels = first ? first->embeddings.deepstack.size() : 0;
  p->row_stride = hidden * static_cast<int64_t>(1 + levels);
  size_t total = 0;
  const auto check_item = [&](const EncodedImage& im, const std::string& name) {
    const int64_t want = model::image_run_tokens(im.grid, merge);
    if (im.embeddings.rows != want || im.embeddings.cols != hidden ||
        im.embeddings.values.size() != static_cast<size_t>(want * hidden))
      throw RequestError(fmt::format("{}: {} encoder rows of {} values, but its grid (t {}, h {}, w {}) needs {} rows "
                                     "of the hidden size {}",
                                     name, im.embeddings.rows, im.embeddings.cols, im.grid.t, im.grid.h, im.grid.w,
                                     want, hidden));
    if (im.embeddings.deepstack.size() != levels)
      throw RequestError(fmt::format("{}: {} DeepStack levels, but the first image or video has {}", name,
                                     im.embeddings.deepstack.size(), levels));
    for (size_t l = 0; l < levels; ++l)
      if (im.embeddings.deepstack[l].size() != im.embeddings.values.size())
        throw RequestError(fmt::format("{}: DeepStack level {} holds {} values, its encoder rows {}", name, l,
                                       im.embeddings.deepstack[l].size(), im.embeddings.values.size()));
    total += im.embeddings.values.size() * (1 + levels);
  };
  for (size_t k = 0; k < videos.size(); ++k) check_item(videos[k], fmt::format("video {}", k + 1));
  for (const EncodedImage& im : images) total += im.embeddings.values.size() * (1 + levels);
  p->rows.reserve(total);  // never reallocated below: embeds point into it
  std::vector<model::ImageRun> runs;
  std::vector<size_t> row_start;
  size_t next_image = 0, next_video = 0;
  int64_t group = 0;  // the next frame group of videos[next_video]
  for (size_t i = 0; i < prompt.size();) {
    const bool is_image = prompt[i] == image_pad, is_video = video_pad && prompt[i] == *video_pad;
    if (!is_image && !is_video) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < prompt.size() && prompt[j] == prompt[i]) ++j;
    Block b;
    if (is_image) {
      const size_t k = next_image++;
      if (k >= images.size())
        throw RequestError(fmt::format("image placeholder run at token {} has no image ({} image(s) given)", i,
                                       images.size()));
      const EncodedImage& im = images[k];
      const int64_t want = model::image_run_tokens(im.grid, merge);
      if (static_cast<int64_t>(j - i) != want || im.embeddings.rows != want || im.embeddings.cols != hidden ||
          im.embeddings.values.size() != static_cast<size_t>(want * hidden))
        throw RequestError(fmt::format("image {}: {} placeholder tokens, {} encoder rows of {} values, but its grid "
                                       "(t {}, h {}, w {}) needs {} rows of the hidden size {}",
                                       k + 1, j - i, im.embeddings.rows, im.embeddings.cols, im.grid.t, im.grid.h,
                                       im.grid.w, want, hidden));
      b = {im.grid, &im, 0, fmt::format("image {}", k + 1)};
    } else {
      if (next_video >= videos.size())
        throw RequestError(fmt::format("video placeholder run at token {} has no video ({} video(s) given)", i,
                                       videos.size()));
      const EncodedImage& v = videos[next_video];
      const vision::GridThw g{1, v.grid.h, v.grid.w};
      const int64_t per_group = model::image_run_tokens(g, merge);
      if (static_cast<int64_t>(j - i) != per_group)
        throw RequestError(fmt::format("video {}: a run of {} video placeholder tokens at token {}, but each of its "
                                       "frame groups is {} tokens",
                                       next_video + 1, j - i, i, per_group));
      b = {g, &v, group * per_group, fmt::format("video {}", next_video + 1)};
      if (++group == v.grid.t) {
        ++next_video;
        group = 0;
      }
    }
    if (b.item->embeddings.deepstack.size() != levels)
      throw RequestError(fmt::format("{}: {} DeepStack levels, but the first image or video has {}", b.name,
                                     b.item->embeddings.deepstack.size(), levels));
    for (size_t l = 0; l < levels; ++l)
      if (b.item->embeddings.deepstack[l].size() != b.item->embeddings.values.size())
        throw RequestError(fmt::format("{}: DeepStack level {} holds {} values, its encoder rows {}", b.name, l,
                                       b.item->embeddings.deepstack[l].size(), b.item->embeddings.values.size()));
    runs.push_back({static_cast<int64_t>(i), b.grid});
    row_start.push_back(p->rows.size());
    const int64_t n = static_cast<int64_t>(j - i);
    for (int64_t r = b.first_row; r < b.first_row + n; ++r) {
      const auto row = [&](const std::vector<float>& v) { return v.begin() + r * hidden; };
      p->rows.insert(p->rows.end(), row(b.item->embeddings.values), row(b.item->embeddings.values) + hidden);
      for (size_t l = 0; l < levels; ++l)
        p->rows.insert(p->rows.end(), row(b.item->embeddings.deepstack[l]), row(b.item->embeddings.deepstack[l]) + hidden);
    }
    blocks.push_back(std::move(b));
    i = j;
  }
  if (next_image != images.size())
    throw RequestError(fmt::format("the prompt has {} image placeholder run(s) for {} image(s)", next_image,
                                   images.size()));
  if (next_video != videos.size() || group != 0)
    throw RequestError(fmt::format("the prompt's video placeholder runs cover {} of {} video(s){}", next_video,
                                   videos.size(), group ? fmt::format(" (video {} stops after frame group {})",
                                                                      next_video + 1, group)
                                                        : std::string()));
  model::MropePositions pos = model::mrope_positions(static_cast<int64_t>(prompt.size()), runs, merge);
  p->positions = std::move(pos.thw);
  p->embeds.assign(prompt.size(), nullptr);
  p->cache_key.assign(prompt.begin(), prompt.end());
  for (size_t k = 0; k < runs.size(); ++k) {
    const int64_t n = model::image_run_tokens(runs[k].grid, merge);
    for (int64_t r = 0; r < n; ++r) {
      const size_t t = static_cast<size_t>(runs[k].first + r);
      p->embeds[t] = p->rows.data() + row_start[k] + static_cast<size_t>(r * p->row_stride);
      // Negative, so never a vocabulary id: the item's hash and the row's index in it.
      const uint64_t row = static_cast<uint64_t>(blocks[k].first_row + r);
      p->cache_key[t] = -1 - static_cast<int32_t>(splitmix(blocks[k].item->hash + row) & 0x7ffffffeu);
    }
  }
  return p;
}

namespace {
// Runs of `soft` tokens, each one bidirectional block: `block` long for every image and crop
// (Gemma 3), or 0: one block per image, its rows long (Gemma 4).
// bidirectional false: the same runs, causal (Nemotron), no bidir_end.
std::shared_ptr<const PromptImages> make_block_prompt_images(std::span<const int32_t> prompt, int32_t soft,
                                                             std::vector<EncodedImage> images, int64_t fixed_block,
                                                             int64_t hidden, bool bidirectional = true) {
  auto p = std::make_shared<PromptImages>();
  p->count = static_cast<int64_t>(images.size());
  p->embeds.assign(prompt.size(), nullptr);
  p->bidir_end.assign(prompt.size(), -1);
  p->cache_key.assign(prompt.begin(), prompt.end());
  size_t total = 0;
  for (const EncodedImage& im : images) {
    const int64_t blocks = 1 + im.crops, block = fixed_block > 0 ? fixed_block : im.embeddings.rows;
    if (im.embeddings.rows != blocks * block || im.embeddings.cols != hidden ||
        im.embeddings.values.size() != static_cast<size_t>(blocks * block * hidden))
      throw RequestError(fmt::format("image {}: {} encoder rows of {} values, but {} block(s) of {} tokens of the "
                                     "hidden size {}",
                                     &im - images.data() + 1, im.embeddings.rows, im.embeddings.cols, blocks, block,
                                     hidden));
    total += im.embeddings.values.size();
  }
  p->rows.reserve(total);  // never reallocated below: embeds point into it
  for (const EncodedImage& im : images) p->rows.insert(p->rows.end(), im.embeddings.values.begin(), im.embeddings.values.end());
  size_t k = 0;          // the image
  int64_t in_image = 0;  // blocks of image k seen
  int64_t row = 0;       // rows of all images before
  for (size_t i = 0; i < prompt.size();) {
    if (prompt[i] != soft) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < prompt.size() && prompt[j] == soft) ++j;
    if (k >= images.size())
      throw RequestError(fmt::format("image token run at token {} has no image ({} image(s) given)", i, images.size()));
    const int64_t block = fixed_block > 0 ? fixed_block : images[k].embeddings.rows;
    if (static_cast<int64_t>(j - i) != block)
      throw RequestError(fmt::format("image {}: a run of {} image tokens at token {}, but {} {} {}", k + 1, j - i, i,
                                     fixed_block > 0 ? "each image and crop is" : "the image has", block,
                                     fixed_block > 0 ? "(mm_tokens_per_image)" : "soft tokens"));
    for (size_t t = i; t < j; ++t, ++row) {
      p->embeds[t] = p->rows.data() + static_cast<size_t>(row * hidden);
      p->bidir_end[t] = static_cast<int64_t>(j) - 1;
      const int64_t r = in_image * block + static_cast<int64_t>(t - i);
      p->cache_key[t] = -1 - static_cast<int32_t>(splitmix(images[k].hash + static_cast<uint64_t>(r)) & 0x7ffffffeu);
    }
    if (++in_image == 1 + images[k].crops) {
      ++k;
      in_image = 0;
    }
    i = j;
  }
  if (k != images.size() || in_image != 0)
    throw RequestError(fmt::format("the prompt's image token runs cover {} of {} image(s)", k, images.size()));
  if (!bidirectional) p->bidir_end.clear();
  return p;
}
}  // namespace

std::shared_ptr<const PromptImages> make_gemma3_prompt_images(std::span<const int32_t> prompt, int32_t soft,
                                                              std::vector<EncodedImage> images, int64_t block,
                                                              int64_t hidden) {
  if (block <= 0) throw RequestError(fmt::format("mm_tokens_per_image {} must be positive", block));
  return make_block_prompt_images(prompt, soft, std::move(images), block, hidden);
}

std::shared_ptr<const PromptImages> make_gemma4_prompt_images(std::span<const int32_t> prompt, int32_t soft,
                                                              std::vector<EncodedImage> images, int64_t hidden) {
  return make_block_prompt_images(prompt, soft, std::move(images), 0, hidden);
}

std::shared_ptr<const PromptImages> make_nemotron_prompt_images(std::span<const int32_t> prompt, int32_t image,
                                                                std::vector<EncodedImage> images, int64_t hidden) {
  return make_block_prompt_images(prompt, image, std::move(images), 0, hidden, /*bidirectional=*/false);
}

uint64_t image_content_hash(const vision::NemotronPixels& px) {
  uint64_t h = 14695981039346656037ull;
  const int64_t dims[4] = {px.grid.h, px.grid.w, px.rows, px.cols};
  h = fnv1a(h, dims, sizeof dims);
  return fnv1a(h, px.pixel_values.data(), px.pixel_values.size() * sizeof(float));
}

}  // namespace fp4lm::engine
