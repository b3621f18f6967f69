#pragma once
// What a front end runs (`serve`, `generate`, `eval`, fp4lm.LLM), opened in one place: the
// checkpoint's tokenizer and chat template (TextFront), and the model with the step model the
// engine drives (Runtime) — loaded whole in this process, or a pipeline's first stage, which
// dist::Pipeline loads and hands over (dist sits above the engine).
#include <memory>
#include <optional>
#include <string>

#include "engine/causal_lm_step_model.h"
#include "engine/step_model.h"
#include "model/causal_lm.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::engine {

struct TextFront {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;  // null: DIR has no tokenizer.json
  std::optional<tokenizer::ChatTemplate> chat;      // absent: no tokenizer, or `chat_error`
  std::string chat_error;                           // why a present tokenizer has no chat template
  // DIR/tokenizer.json and its chat template. A malformed tokenizer is an Error; a missing or bad
  // template only leaves `chat` empty (text completions still run), each front end saying so its way.
  static TextFront open(const std::string& dir);
};

class Runtime {
 public:
  // The whole model in this process (model::CausalLM::load's errors).
  static Runtime load(const std::string& dir, const model::EngineOptions& opts, const model::LoadOptions& lo);
  // A pipeline's driver: `step` runs every stage, `stage` is the first stage's model (its limits,
  // tokenizer-facing facts and checkpoint are the whole model's). Both outlive the Runtime.
  static Runtime over(StepModel& step, const model::CausalLM& stage);

  StepModel& step_model() const { return *step_; }
  const model::CausalLM& model() const { return *lm_; }

 private:
  Runtime() = default;
  std::unique_ptr<model::CausalLM> whole_;
  std::unique_ptr<CausalLmStepModel> whole_step_;
  StepModel* step_ = nullptr;
  const model::CausalLM* lm_ = nullptr;
};

}  // namespace fp4lm::engine
