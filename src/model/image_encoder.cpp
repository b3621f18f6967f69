#include "model/image_encoder.h"

#include "core/error.h"

namespace fp4lm::model {

ImageEmbeddings ImageEncoder::encode(const vision::QwenVlPixels&) const {
  fail("this model's vision tower takes Gemma 3 processor pixels, not Qwen-VL patches");
}

ImageEmbeddings ImageEncoder::encode(const vision::Gemma3Pixels&) const {
  fail("this model's vision tower takes Qwen-VL processor patches, not Gemma 3 pixels");
}

}  // namespace fp4lm::model
