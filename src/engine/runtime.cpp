#include "engine/runtime.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/checkpoint.h"

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

Runtime Runtime::load_any(const std::string& dir, const model::EngineOptions& opts, const model::LoadOptions& lo) {
  std::ifstream in(std::filesystem::path(dir) / "config.json");
  const nlohmann::json cfg = in ? nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false) : nlohmann::json();
  if (!cfg.is_object() || !model::is_diffusion_gemma(cfg)) return load(dir, opts, lo);  // load() reports bad files
  if (lo.mtp) fail("{}: DiffusionGemma has no MTP head (speculative method \"mtp\")", dir);
  Runtime r;
  r.diffusion_ = model::DiffusionGemma::load(dir, opts);
  r.schedule_ = parse_diffusion_schedule(r.diffusion_->generation_config(), dir + "/generation_config.json");
  const int64_t max_pos = r.diffusion_->config().max_position_embeddings;
  if (lo.max_model_len > max_pos)
    fail("{}: max_model_len {} exceeds the model's max_position_embeddings ({})", dir, lo.max_model_len, max_pos);
  r.max_len_ = lo.max_model_len > 0 ? lo.max_model_len : std::min<int64_t>(max_pos, 8192);
  return r;
}

Runtime Runtime::open(const std::string& dir, const EngineConfig& cfg, const StageLoader& stages) {
  if (cfg.pipeline_parallel_size > 1 && !stages)
    throw RequestError("pipeline_parallel_size > 1 runs under mpirun, which this front end does not join",
                       "pipeline_parallel_size");
  Runtime r = stages ? stages(dir, cfg.model, cfg.load) : load_any(dir, cfg.model, cfg.load);
  if (r.diffusion() && !cfg.scheduler.speculative.method.empty())
    throw RequestError("speculative_config: DiffusionGemma (block diffusion) does not speculate", "speculative_config");
  return r;
}

const std::optional<nlohmann::json>& Runtime::generation_config() const {
  return diffusion_ ? diffusion_->generation_config() : model().checkpoint().generation_config();
}

void Runtime::not_causal() {
  fail("DiffusionGemma (block diffusion) is not a token-by-token model: it runs through `fp4lm generate`, "
       "`fp4lm serve` and fp4lm.LLM only");
}

Runtime Runtime::over(StepModel& step, const model::CausalLM& stage) {
  Runtime r;
  r.step_ = &step;
  r.lm_ = &stage;
  return r;
}

}  // namespace fp4lm::engine
