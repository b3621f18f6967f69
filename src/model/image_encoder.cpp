#include "model/image_encoder.h"

#include "core/error.h"

namespace fp4lm::model {

const char* image_family_name(ImageFamily f) {
  switch (f) {
    case ImageFamily::qwen_vl: return "Qwen-VL processor patches";
    case ImageFamily::gemma3: return "Gemma 3 processor pixels";
    case ImageFamily::gemma4: return "Gemma 4 processor patches";
    case ImageFamily::nemotron: return "Nemotron Omni processor patches";
  }
  return "?";
}

ImageEmbeddings ImageEncoder::encode(const vision::QwenVlPixels&) const {
  fail("this model's vision tower takes {}, not Qwen-VL processor patches", image_family_name(family()));
}

ImageEmbeddings ImageEncoder::encode(const vision::Gemma3Pixels&) const {
  fail("this model's vision tower takes {}, not Gemma 3 processor pixels", image_family_name(family()));
}

ImageEmbeddings ImageEncoder::encode(const vision::Gemma4Pixels&) const {
  fail("this model's vision tower takes {}, not Gemma 4 processor patches", image_family_name(family()));
}

ImageEmbeddings ImageEncoder::encode(const vision::NemotronPixels&) const {
  fail("this model's vision tower takes {}, not Nemotron Omni processor patches", image_family_name(family()));
}

}  // namespace fp4lm::model
