#include "tokenizer/post_processors.h"

namespace fp4lm::tokenizer {

void TemplateProcessor::process(std::vector<int32_t>& ids) const {
  if (!before_.empty()) ids.insert(ids.begin(), before_.begin(), before_.end());
  ids.insert(ids.end(), after_.begin(), after_.end());
}

}  // namespace fp4lm::tokenizer
