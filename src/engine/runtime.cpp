#include "engine/runtime.h"

#include <filesystem>

#include "core/error.h"

namespace fp4lm::engine {

TextFront TextFront::open(const std::string& dir) {
  TextFront t;
  if (!std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) return t;
  t.tokenizer = tokenizer::Tokenizer::from_dir(dir);
  try {
    t.chat.emplace(tokenizer::ChatTemplate::from_dir(dir));
  } catch (const Error& e) {
    t.chat_error = e.what();
  }
  return t;
}

Runtime Runtime::load(const std::string& dir, const model::EngineOptions& opts, const model::LoadOptions& lo) {
  Runtime r;
  r.whole_ = model::CausalLM::load(dir, opts, lo);
  r.whole_step_ = std::make_unique<CausalLmStepModel>(*r.whole_);
  r.step_ = r.whole_step_.get();
  r.lm_ = r.whole_.get();
  return r;
}

Runtime Runtime::over(StepModel& step, const model::CausalLM& stage) {
  Runtime r;
  r.step_ = &step;
  r.lm_ = &stage;
  return r;
}

}  // namespace fp4lm::engine
