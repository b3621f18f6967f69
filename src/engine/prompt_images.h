#pragma once
// The images of one prompt as the engine runs them (issue 43): each image's placeholder run
// (the chat template's single <|image_pad|> repeated to the image's token count, as the Hugging
// Face Qwen-VL processors expand it), the encoder rows that replace those tokens' embeddings,
// every prompt token's 3-D M-RoPE positions (model/layers/mrope_positions.h), and the key the prefix
// cache sees: the prompt with each placeholder replaced by an id drawn from its image's content
// hash, so two requests with the same image share cached blocks and two different images of the
// same size (the same placeholder ids) never do.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "model/image_encoder.h"
#include "model/layers/mrope_positions.h"
#include "vision/gemma4_preprocess.h"
#include "vision/qwen_vl_preprocess.h"

namespace fp4lm::engine {

struct PromptImages {
  int64_t count = 0;                 // images
  std::vector<float> rows;           // every image's encoder rows, in prompt order, [*, row_stride]
  // Floats per encoder row in `rows`: hidden x (1 + DeepStack levels); a row's level l values
  // follow it at + (l + 1) x hidden (model::SequenceChunk::embeds).
  int64_t row_stride = 0;
  std::vector<const float*> embeds;  // per prompt token: its encoder row (into rows) or null
  std::vector<int64_t> positions;    // 3 per prompt token (t, h, w); empty: 1-D positions (Gemma 3)
  std::vector<int32_t> cache_key;    // the prefix cache's view of the prompt (see above)
  // Gemma 3: per prompt token the last position of its image block (its run of soft tokens: the
  // block's tokens attend to each other both ways), -1 for text; empty for Qwen (causal).
  std::vector<int64_t> bidir_end;
};

// One encoded image: the encoder's rows, its grid (patches) and a hash of its content.
struct EncodedImage {
  model::ImageEmbeddings embeddings;
  vision::GridThw grid;  // Qwen-VL
  int64_t crops = 0;     // Gemma 3: pan-and-scan crops (each its own block of rows after the image's)
  int64_t frames = 0;    // a Qwen3-VL video: the frames given (grid.t temporal groups of them); 0: an image
  uint64_t hash = 0;
};

// A content hash of the processor's pixels and grid (what the encoder reads): the same image,
// whatever file it came in, hashes the same; any different pixel gives another hash.
uint64_t image_content_hash(const vision::QwenVlPixels& px);
uint64_t image_content_hash(const vision::Gemma3Pixels& px);
uint64_t image_content_hash(const vision::Gemma4Pixels& px);
uint64_t image_content_hash(const vision::NemotronPixels& px);

// `prompt` with its k-th `pad` token (one per image, as the chat template renders an image part)
// repeated counts[k] times. RequestError when the prompt holds another number of pads than images
// (naming both), or when a pad is already repeated.
std::vector<int32_t> expand_image_placeholders(std::span<const int32_t> prompt, int32_t pad,
                                               std::span<const int64_t> counts);

// The images of an expanded prompt (expand_image_placeholders): RequestError when an image's rows
// disagree with its placeholder run or the hidden size (naming the image).
std::shared_ptr<const PromptImages> make_prompt_images(std::span<const int32_t> prompt, int32_t pad,
                                                       std::vector<EncodedImage> images, int64_t merge_size,
                                                       int64_t hidden_size);

// The same with videos (Qwen3-VL): runs of `image_pad` take the images in order, runs of
// `video_pad` the videos' frame groups in order (each group its own run of (h / merge) x
// (w / merge) tokens, grid (1, h, w): Qwen3VLProcessor writes the groups apart, timestamps between,
// and get_rope_index positions each as an image). RequestError naming the image or video when a run
// disagrees with its rows, or the runs do not cover every item.
std::shared_ptr<const PromptImages> make_qwen_prompt_media(std::span<const int32_t> prompt, int32_t image_pad,
                                                           std::vector<EncodedImage> images,
                                                           std::optional<int32_t> video_pad,
                                                           std::vector<EncodedImage> videos, int64_t merge_size,
                                                           int64_t hidden_size);

// Gemma 3: the images of a prompt already expanded as Gemma3Processor writes it (one run of
// `soft` tokens, `block` long, for each image and each of its crops, in order): the rows, the
// bidirectional blocks and the cache key; no 3-D positions. RequestError when the runs disagree
// with the images (naming the image).
std::shared_ptr<const PromptImages> make_gemma3_prompt_images(std::span<const int32_t> prompt, int32_t soft,
                                                              std::vector<EncodedImage> images, int64_t block,
                                                              int64_t hidden_size);
// Gemma 4: the same for a prompt expanded as Gemma4Processor writes it (boi, one run of `soft`
// tokens per image, as long as that image's encoder rows, eoi); each run one block.
std::shared_ptr<const PromptImages> make_gemma4_prompt_images(std::span<const int32_t> prompt, int32_t soft,
                                                              std::vector<EncodedImage> images, int64_t hidden_size);

// Nemotron VL / Omni: a prompt expanded as its processor writes it (<img>, one run of `image`
// tokens per image as long as its encoder rows, </img>): the rows and the cache key; causal, 1-D
// positions.
std::shared_ptr<const PromptImages> make_nemotron_prompt_images(std::span<const int32_t> prompt, int32_t image,
                                                                std::vector<EncodedImage> images, int64_t hidden_size);

}  // namespace fp4lm::engine
