#pragma once
// What a front end runs (`serve`, `generate`, `eval`, fp4lm.LLM), opened in one place: the
// checkpoint's tokenizer and chat template (TextFront), and the model with the step model the
// engine drives (Runtime) — loaded whole in this process, or a pipeline's first stage, which
// dist::Pipeline loads and hands over (dist sits above the engine).
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "engine/causal_lm_step_model.h"
#include "engine/diffusion_generator.h"
#include "engine/engine_args.h"
#include "engine/step_model.h"
#include "model/causal_lm.h"
#include "model/diffusion_gemma.h"
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
  // Loads a pipeline's first stage and returns the Runtime over() it (dist::Pipeline::load: dist
  // sits above the engine, so a front end that joined a pipeline hands it in).
  using StageLoader =
      std::function<Runtime(const std::string& dir, const model::EngineOptions&, const model::LoadOptions&)>;
  // What every front end calls: the checkpoint in `dir` as `cfg` says, through `stages` when it
  // runs as a pipeline, else whole in this process (load_any: a DiffusionGemma too). Settings the
  // loaded model cannot take are refused here, once: RequestError naming the parameter.
  static Runtime open(const std::string& dir, const EngineConfig& cfg, const StageLoader& stages = {});
  // The whole model in this process (model::CausalLM::load's errors).
  static Runtime load(const std::string& dir, const model::EngineOptions& opts, const model::LoadOptions& lo);
  // A pipeline's driver: `step` runs every stage, `stage` is the first stage's model (its limits,
  // tokenizer-facing facts and checkpoint are the whole model's). Both outlive the Runtime.
  static Runtime over(StepModel& step, const model::CausalLM& stage);
  // load(), or a DiffusionGemma checkpoint (block diffusion, not a CausalLM) as diffusion() with
  // generation_config.json's schedule, which the engine runs through engine/diffusion_queue.h
  // (`serve`, fp4lm.LLM). lo.max_model_len as for a CausalLM; lo.mtp is refused for it.
  static Runtime load_any(const std::string& dir, const model::EngineOptions& opts, const model::LoadOptions& lo);

  // A CausalLM's: Error naming the checkpoint for a DiffusionGemma (not a token-by-token model).
  StepModel& step_model() const {
    if (!step_) not_causal();
    return *step_;
  }
  const model::CausalLM& model() const {
    if (!lm_) not_causal();
    return *lm_;
  }
  // The DiffusionGemma (null for a CausalLM) and its schedule.
  const model::DiffusionGemma* diffusion() const { return diffusion_.get(); }
  const DiffusionSchedule& diffusion_schedule() const { return schedule_; }
  // Either kind's: the context per sequence, the vocabulary, the ids that end generation, the
  // checkpoint's generation_config.json.
  int64_t max_model_len() const { return diffusion_ ? max_len_ : model().max_model_len(); }
  int64_t vocab_size() const { return diffusion_ ? diffusion_->config().vocab_size : model().vocab_size(); }
  std::vector<int64_t> eos_ids() const { return diffusion_ ? schedule_.eos_token_ids : model().eos_ids(); }
  const std::optional<nlohmann::json>& generation_config() const;

 private:
  Runtime() = default;
  [[noreturn]] static void not_causal();
  std::unique_ptr<model::DiffusionGemma> diffusion_;
  DiffusionSchedule schedule_;
  int64_t max_len_ = 0;
  std::unique_ptr<model::CausalLM> whole_;
  std::unique_ptr<CausalLmStepModel> whole_step_;
  StepModel* step_ = nullptr;
  const model::CausalLM* lm_ = nullptr;
};

}  // namespace fp4lm::engine
