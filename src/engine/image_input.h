#pragma once
// Images from a front end (server, Python LLM, CLI) into a request: decoded with limits
// (vision/image_decode.h), preprocessed as the checkpoint's Hugging Face processor
// (preprocessor_config.json: vision/qwen_vl_preprocess.h or vision/gemma3_preprocess.h, by the
// tower's model::ImageFamily), encoded by the model's vision tower (CausalLM::image_encoder), and
// attached to the request with its placeholders expanded (engine/prompt_images.h). Each step's
// error is a RequestError naming the image ("image 2: ...").
//
// The prompt holds one placeholder per image, as the chat template writes an image part:
//   Qwen-VL  <|image_pad|> (image_token_id), repeated to the image's merged patch count;
//   Gemma 3  <start_of_image> (boi_token_index), replaced as Gemma3Processor replaces it:
//            "\n\n<start_of_image>" + <image_soft_token> x mm_tokens_per_image + "<end_of_image>\n\n",
//            and with pan-and-scan crops "Here is the original image " + that + " and here are some
//            crops to help you see better " + one such block per crop joined by " ". The text
//            pieces are tokenized by the model's tokenizer; a run of newline tokens that the
//            insertion makes adjacent is tokenized again as one string (as the processor, which
//            tokenizes the whole text, sees "\n" + "\n\n" as "\n\n\n").
//   Gemma 4  <|image|> (image_token_id), replaced as Gemma4Processor replaces it:
//            <|image> (boi_token_id) + <|image|> x the image's soft tokens + <image|> (eoi_token_id);
//            all three are special tokens, so no text around them is tokenized again.
//   Nemotron <image> (image_token_id), replaced as NemotronH_Omni_Reasoning_V3Processor replaces it:
//            <img> + <image> x the image's tokens (grid h * w / merge^2) + </img>, the two tags
//            the tokenizer's tokens (each must be one token).
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/prompt_images.h"
#include "engine/request.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"
#include "vision/gemma3_processor_config.h"
#include "vision/gemma4_processor_config.h"
#include "vision/nemotron_processor_config.h"
#include "vision/image_decode.h"
#include "vision/qwen_vl_processor_config.h"
#include "vision/qwen_vl_video.h"

namespace fp4lm::engine {

// Gemma 3's prompt side: the special tokens (config.json) and the tokenizer for the text around them.
struct Gemma3ImageTokens {
  int32_t boi = 0, eoi = 0, soft = 0;  // boi_token_index, eoi_token_index, image_token_index
  int64_t per_image = 256;             // mm_tokens_per_image
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;
};

// Gemma 4's prompt side (config.json).
struct Gemma4ImageTokens {
  int32_t boi = 0, eoi = 0, soft = 0;  // boi_token_id, eoi_token_id, image_token_id
};

// Nemotron VL / Omni's prompt side: image_token_id (config.json), <img> / </img> (tokenizer).
struct NemotronImageTokens {
  int32_t image = 0, start = 0, end = 0;
};

class ImageInput {
 public:
  // For the model loaded from `dir`: null when it has no vision tower (a text-only architecture
  // or a checkpoint without one). Reads config.json's token ids, the processor's config (and for
  // Gemma 3 the tokenizer): Errors naming the file.
  static std::unique_ptr<ImageInput> for_model(const model::CausalLM& lm, const std::string& dir,
                                               vision::ImageLimits limits = {});
  ImageInput(const model::ImageEncoder& encoder, vision::QwenVlProcessorConfig processor, int32_t image_pad_id,
             int64_t merge_size, vision::ImageLimits limits);
  ImageInput(const model::ImageEncoder& encoder, vision::Gemma3ProcessorConfig processor, Gemma3ImageTokens tokens,
             vision::ImageLimits limits);
  ImageInput(const model::ImageEncoder& encoder, vision::Gemma4ProcessorConfig processor, Gemma4ImageTokens tokens,
             vision::ImageLimits limits);
  ImageInput(const model::ImageEncoder& encoder, vision::NemotronProcessorConfig processor,
             NemotronImageTokens tokens, vision::ImageLimits limits);

  // One image file's bytes -> its encoder rows, grid and content hash; `name` is what errors call it.
  // `images_in_call`: how many images the request holds (Nemotron's processor gives every image of
  // one call the same patch budget, max((max_model_len - 4) * merge^2, min_num_patches * images)
  // clamped to [min, max]; the other processors size each image alone).
  EncodedImage encode(std::span<const uint8_t> bytes, const std::string& name, int64_t images_in_call = 1) const;
  // The same in two steps, so that a caller can check the image's size (tokens_for) before the
  // tower runs: decode (with this input's limits), then encode the decoded image.
  vision::RgbImage decode(std::span<const uint8_t> bytes, const std::string& name) const;
  EncodedImage encode(const vision::RgbImage& image, const std::string& name, int64_t images_in_call = 1) const;
  // The tokens an image of this size adds to the prompt in place of its placeholder, without
  // decoding its pixels (Gemma 3: at most; merged newlines make it a token or two less).
  int64_t tokens_for(int64_t height, int64_t width, int64_t images_in_call = 1) const;
  // Expands p.prompt's image placeholders (one per image, in order) and sets p.images.
  // RequestError when the counts disagree or the prompt no longer fits `max_model_len` (naming the
  // image that made it too long).
  void attach(RequestParams& p, std::vector<EncodedImage> images, int64_t max_model_len) const;

  // The token the prompt holds per image (Qwen: <|image_pad|>; Gemma 3: <start_of_image>; Gemma 4:
  // <|image|>).
  int32_t image_pad_id() const { return pad_; }

  // Video given as frames (Qwen3-VL / Qwen3.5: a checkpoint whose video_preprocessor_config.json is
  // a Qwen3VLVideoProcessor; vision/qwen_vl_video.h). The prompt holds one <|video_pad|> per video
  // (the chat template's video part), replaced as Qwen3VLProcessor replaces it: per temporal group
  // of frames its timestamp text ("<0.1 seconds>", tokenized by the model's tokenizer, at the
  // processor's 24 fps for frames without metadata), <|vision_start|>, the group's <|video_pad|>
  // tokens, <|vision_end|>. The videos' tokens follow the images' in attach's checks.
  // Empty when the model takes videos, else why not (RequestError text naming the model's files).
  const std::string& video_refusal() const { return video_refusal_; }
  // The frames (decoded images, all the same size) -> the video's encoder rows, grid and hash;
  // RequestError naming `name` (zero frames, one frame, frames of different sizes, no video support).
  EncodedImage encode_video(const std::vector<vision::RgbImage>& frames, const std::string& name) const;
  // The tokens a video of `frames` frames of this size adds in place of its placeholder.
  int64_t tokens_for_video(int64_t frames, int64_t height, int64_t width) const;
  // Before the tower runs: RequestError (attach's message) when videos of these sizes ({frames,
  // height, width} each, in prompt order) make a prompt of `prompt_tokens` (placeholders included)
  // reach max_model_len, so that an over-long video is refused before its frames are encoded.
  void check_videos_fit(int64_t prompt_tokens, const std::vector<std::array<int64_t, 3>>& videos,
                        int64_t max_model_len) const;
  // attach with videos as well (Qwen3-VL): RequestError when the prompt's <|video_pad|> count
  // differs from the videos', or the prompt no longer fits max_model_len (naming the video).
  void attach(RequestParams& p, std::vector<EncodedImage> images, std::vector<EncodedImage> videos,
              int64_t max_model_len) const;
  int32_t video_pad_id() const { return video_pad_; }

 private:
  std::vector<int32_t> gemma3_expand(std::span<const int32_t> prompt, const std::vector<EncodedImage>& images) const;
  std::vector<int32_t> gemma4_expand(std::span<const int32_t> prompt, const std::vector<EncodedImage>& images) const;
  // Each placeholder `soft` -> begin + soft x the image's rows + end (Gemma 4, Nemotron).
  std::vector<int32_t> tagged_expand(std::span<const int32_t> prompt, const std::vector<EncodedImage>& images,
                                     int32_t begin, int32_t soft, int32_t end, const char* soft_name) const;

  const model::ImageEncoder& encoder_;
  std::optional<vision::QwenVlProcessorConfig> qwen_;
  std::optional<vision::Gemma3ProcessorConfig> gemma3_;
  Gemma3ImageTokens g3_;
  std::optional<vision::Gemma4ProcessorConfig> gemma4_;
  Gemma4ImageTokens g4_;
  std::optional<vision::NemotronProcessorConfig> nemotron_;
  NemotronImageTokens nt_;
  std::vector<int32_t> nl2_, original_, crops_, space_;  // Gemma 3's text pieces, tokenized
  int32_t pad_;
  int64_t merge_ = 1;
  vision::ImageLimits limits_;
  // Qwen3-VL video (set by for_model when the checkpoint's video processor is one fp4lm runs).
  std::optional<vision::QwenVlVideoConfig> video_;
  std::string video_refusal_ = "this model's vision input takes no video";
  int32_t video_pad_ = -1, vision_start_ = -1, vision_end_ = -1;
  std::shared_ptr<const tokenizer::Tokenizer> video_tokenizer_;  // the timestamps' text
  void setup_video(const nlohmann::json& config, const std::string& config_path, const std::string& dir);
  std::vector<int32_t> expand_videos(std::span<const int32_t> prompt, const std::vector<EncodedImage>& videos) const;
};

// The error a model without a vision tower gives an image: names the model.
[[noreturn]] void refuse_images(const std::string& model_name);

}  // namespace fp4lm::engine
