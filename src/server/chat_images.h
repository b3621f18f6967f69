#pragma once
// The images of a chat request from their URLs to the vision tower's rows, one image at a time
// (only one decoded image is ever held): loaded (engine/media_url.h: data: URLs, file:// under
// --allowed-local-media-path), decoded with limits, its token count added to the prompt's and
// checked against the context before the tower runs, then encoded (engine/image_input.h). Every
// failure is a 400 naming the image ("image 2: ...") with the part's field as `param`.
#include <cstdint>
#include <vector>

#include "engine/prompt_images.h"
#include "server/chat_schema.h"
#include "server/serving_model.h"

namespace fp4lm::server {

// `text_tokens`: the prompt's tokens other than the images' placeholders. `m.images` must be set.
std::vector<engine::EncodedImage> encode_chat_images(const std::vector<ImagePart>& images, const ServingModel& m,
                                                     int64_t text_tokens);

}  // namespace fp4lm::server
