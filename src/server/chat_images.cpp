#include "server/chat_images.h"

#include <fmt/format.h>

#include "engine/image_input.h"
#include "engine/media_url.h"
#include "engine/request_error.h"
#include "server/api_error.h"

namespace fp4lm::server {

std::vector<engine::EncodedImage> encode_chat_images(const std::vector<ImagePart>& images, const ServingModel& m,
                                                     int64_t text_tokens) {
  std::vector<engine::EncodedImage> out;
  int64_t total = text_tokens;
  const auto n = static_cast<int64_t>(images.size());  // the processor's call: all of the request's images
  for (size_t k = 0; k < images.size(); ++k) {
    const std::string name = fmt::format("image {}", k + 1);
    try {
      vision::RgbImage img;
      {
        const std::vector<uint8_t> bytes = engine::load_media_url(images[k].url, m.media, name);
        img = m.images->decode(bytes, name);
      }
      // From the decoded size, before the tower runs: an image that cannot fit costs no encoding.
      const int64_t tokens = m.images->tokens_for(img.height, img.width, n);
      total += tokens;
      if (total >= m.max_model_len)
        throw bad_request(fmt::format("{} ({} tokens for its {}x{} pixels) makes the prompt {} tokens, more than the "
                                      "model's context of {} (max_model_len) leaves room for",
                                      name, tokens, img.width, img.height, total, m.max_model_len),
                          images[k].field);
      out.push_back(m.images->encode(img, name, n));
    } catch (const engine::RequestError& e) {
      throw bad_request(e.what(), images[k].field);
    }
  }
  return out;
}

}  // namespace fp4lm::server
