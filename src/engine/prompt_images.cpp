#include "engine/prompt_images.h"

#include <cstring>

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
  auto p = std::make_shared<PromptImages>();
  p->count = static_cast<int64_t>(images.size());
  std::vector<model::ImageRun> runs;
  // DeepStack levels ride along each encoder row (PromptImages::row_stride); every image has as many.
  const size_t levels = images.empty() ? 0 : images[0].embeddings.deepstack.size();
  p->row_stride = hidden * static_cast<int64_t>(1 + levels);
  size_t total = 0;
  for (const EncodedImage& im : images) total += im.embeddings.values.size() * (1 + levels);
  p->rows.reserve(total);
  std::vector<size_t> row_start;
  for (size_t i = 0; i < prompt.size();) {
    if (prompt[i] != pad) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < prompt.size() && prompt[j] == pad) ++j;
    const size_t k = runs.size();
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
    if (im.embeddings.deepstack.size() != levels)
      throw RequestError(fmt::format("image {}: {} DeepStack levels, but image 1 has {}", k + 1,
                                     im.embeddings.deepstack.size(), levels));
    for (size_t l = 0; l < levels; ++l)
      if (im.embeddings.deepstack[l].size() != im.embeddings.values.size())
        throw RequestError(fmt::format("image {}: DeepStack level {} holds {} values, its encoder rows {}", k + 1, l,
                                       im.embeddings.deepstack[l].size(), im.embeddings.values.size()));
    runs.push_back({static_cast<int64_t>(i), im.grid});
    row_start.push_back(p->rows.size());
    for (int64_t r = 0; r < want; ++r) {
      const auto row = [&](const std::vector<float>& v) { return v.begin() + r * hidden; };
      p->rows.insert(p->rows.end(), row(im.embeddings.values), row(im.embeddings.values) + hidden);
      for (size_t l = 0; l < levels; ++l)
        p->rows.insert(p->rows.end(), row(im.embeddings.deepstack[l]), row(im.embeddings.deepstack[l]) + hidden);
    }
    i = j;
  }
  if (runs.size() != images.size())
    throw RequestError(fmt::format("the prompt has {} image placeholder run(s) for {} image(s)", runs.size(),
                                   images.size()));
  model::MropePositions pos = model::mrope_positions(static_cast<int64_t>(prompt.size()), runs, merge);
  p->positions = std::move(pos.thw);
  p->embeds.assign(prompt.size(), nullptr);
  p->cache_key.assign(prompt.begin(), prompt.end());
  for (size_t k = 0; k < runs.size(); ++k) {
    const int64_t n = model::image_run_tokens(runs[k].grid, merge);
    for (int64_t r = 0; r < n; ++r) {
      const size_t t = static_cast<size_t>(runs[k].first + r);
      p->embeds[t] = p->rows.data() + row_start[k] + static_cast<size_t>(r * p->row_stride);
      // Negative, so never a vocabulary id: the image's hash and the row's index.
      p->cache_key[t] = -1 - static_cast<int32_t>(splitmix(images[k].hash + static_cast<uint64_t>(r)) & 0x7ffffffeu);
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
