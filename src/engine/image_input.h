#pragma once
// Images from a front end (server, Python LLM, CLI) into a request: decoded with limits
// (vision/image_decode.h), preprocessed as the checkpoint's Hugging Face processor
// (preprocessor_config.json, vision/qwen_vl_preprocess.h), encoded by the model's vision tower
// (CausalLM::image_encoder), and attached to the request with its placeholders expanded
// (engine/prompt_images.h). Each step's error is a RequestError naming the image ("image 2: ...").
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/prompt_images.h"
#include "engine/request.h"
#include "model/causal_lm.h"
#include "vision/image_decode.h"
#include "vision/qwen_vl_processor_config.h"

namespace fp4lm::engine {

class ImageInput {
 public:
  // For the model loaded from `dir`: null when it has no vision tower (a text-only architecture
  // or a checkpoint without one). Reads config.json's image_token_id and
  // vision_config.spatial_merge_size and preprocessor_config.json (Errors naming the file).
  static std::unique_ptr<ImageInput> for_model(const model::CausalLM& lm, const std::string& dir,
                                               vision::ImageLimits limits = {});
  ImageInput(const model::ImageEncoder& encoder, vision::QwenVlProcessorConfig processor, int32_t image_pad_id,
             int64_t merge_size, vision::ImageLimits limits);

  // One image file's bytes -> its encoder rows, grid and content hash; `name` is what errors call it.
  EncodedImage encode(std::span<const uint8_t> bytes, const std::string& name) const;
  // The same in two steps, so that a caller can check the image's size (tokens_for) before the
  // tower runs: decode (with this input's limits), then encode the decoded image.
  vision::RgbImage decode(std::span<const uint8_t> bytes, const std::string& name) const;
  EncodedImage encode(const vision::RgbImage& image, const std::string& name) const;
  // The image's token count without decoding its pixels (from its size).
  int64_t tokens_for(int64_t height, int64_t width) const;
  // Expands p.prompt's image placeholders (one <|image_pad|> per image, in order) and sets
  // p.images. RequestError when the counts disagree or the prompt no longer fits `max_model_len`
  // (naming the image that made it too long).
  void attach(RequestParams& p, std::vector<EncodedImage> images, int64_t max_model_len) const;

  int32_t image_pad_id() const { return pad_; }

 private:
  const model::ImageEncoder& encoder_;
  vision::QwenVlProcessorConfig processor_;
  int32_t pad_;
  int64_t merge_;
  vision::ImageLimits limits_;
};

// The error a model without a vision tower gives an image: names the model.
[[noreturn]] void refuse_images(const std::string& model_name);

}  // namespace fp4lm::engine
