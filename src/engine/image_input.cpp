#include "engine/image_input.h"

#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "io/json_file.h"
#include "model/mrope_positions.h"
#include "vision/qwen_vl_preprocess.h"

namespace fp4lm::engine {

std::unique_ptr<ImageInput> ImageInput::for_model(const model::CausalLM& lm, const std::string& dir,
                                                  vision::ImageLimits limits) {
  const model::ImageEncoder* enc = lm.image_encoder();
  if (!enc) return nullptr;
  const std::string cfg_path = (std::filesystem::path(dir) / "config.json").string();
  const nlohmann::json c = io::read_json_file(cfg_path);
  if (!c.contains("image_token_id") || !c["image_token_id"].is_number_integer())
    fail("{}: the model has a vision tower but no integer 'image_token_id'", cfg_path);
  int64_t merge = 2;
  if (c.contains("vision_config") && c["vision_config"].contains("spatial_merge_size"))
    merge = c["vision_config"]["spatial_merge_size"].get<int64_t>();
  auto proc = vision::read_qwen_vl_processor_config((std::filesystem::path(dir) / "preprocessor_config.json").string());
  if (proc.merge_size != merge)
    fail("{}: vision_config.spatial_merge_size {} but preprocessor_config.json's merge_size {}", cfg_path, merge,
         proc.merge_size);
  return std::make_unique<ImageInput>(*enc, std::move(proc), c["image_token_id"].get<int32_t>(), merge, limits);
}

ImageInput::ImageInput(const model::ImageEncoder& encoder, vision::QwenVlProcessorConfig processor,
                       int32_t image_pad_id, int64_t merge_size, vision::ImageLimits limits)
    : encoder_(encoder), processor_(std::move(processor)), pad_(image_pad_id), merge_(merge_size), limits_(limits) {}

namespace {
// Decoding / preprocessing errors are the request's fault: a RequestError naming the image.
template <typename F>
auto named_errors(const std::string& name, F&& f) {
  try {
    return f();
  } catch (const RequestError&) {
    throw;
  } catch (const Error& e) {
    const std::string what = e.what();
    throw RequestError(what.rfind(name, 0) == 0 ? what : fmt::format("{}: {}", name, what), "image");
  }
}
}  // namespace

EncodedImage ImageInput::encode(std::span<const uint8_t> bytes, const std::string& name) const {
  return encode(decode(bytes, name), name);
}

vision::RgbImage ImageInput::decode(std::span<const uint8_t> bytes, const std::string& name) const {
  return named_errors(name, [&] { return vision::decode_image(bytes, limits_, name); });
}

EncodedImage ImageInput::encode(const vision::RgbImage& img, const std::string& name) const {
  return named_errors(name, [&] {
    const vision::QwenVlPixels px = vision::qwen_vl_preprocess(img, processor_);
    EncodedImage e;
    e.grid = px.grid;
    e.hash = image_content_hash(px);
    e.embeddings = encoder_.encode(px);
    return e;
  });
}

int64_t ImageInput::tokens_for(int64_t height, int64_t width) const {
  return vision::qwen_vl_image_tokens(vision::qwen_vl_grid(height, width, processor_), processor_);
}

void ImageInput::attach(RequestParams& p, std::vector<EncodedImage> images, int64_t max_model_len) const {
  std::vector<int64_t> counts;
  int64_t total = static_cast<int64_t>(p.prompt.size()) - static_cast<int64_t>(images.size());
  for (size_t k = 0; k < images.size(); ++k) {
    counts.push_back(model::image_run_tokens(images[k].grid, merge_));
    total += counts.back();
    if (max_model_len > 0 && total >= max_model_len)
      throw RequestError(fmt::format("image {} ({} tokens for its {}x{} patch grid) makes the prompt {} tokens, more "
                                     "than the model's context of {} (max_model_len) leaves room for",
                                     k + 1, counts.back(), images[k].grid.h, images[k].grid.w, total, max_model_len),
                         "image");
  }
  p.prompt = expand_image_placeholders(p.prompt, pad_, counts);
  p.images = make_prompt_images(p.prompt, pad_, std::move(images), merge_, encoder_.hidden_size());
}

void refuse_images(const std::string& model_name) {
  throw RequestError(fmt::format("model '{}' has no vision tower fp4lm runs: it does not accept image inputs",
                                 model_name),
                     "messages");
}

}  // namespace fp4lm::engine
