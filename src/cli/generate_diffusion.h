#pragma once
// `fp4lm generate` for a DiffusionGemma checkpoint (model/diffusion_gemma.h): not a CausalLM, so
// not the scheduler; the request runs through engine/diffusion_generator.h, its output printed
// as `generate` prints it (ids or text streamed by accepted block, or one JSON object).
#include <string>

#include "engine/request.h"
#include "model/engine_options.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::cli {

// Whether dir/config.json names DiffusionGemmaForBlockDiffusion (false when unreadable: the
// normal load reports that).
bool is_diffusion_checkpoint(const std::string& dir);

// `unsupported`: the first generate flag given that this path does not take ("" if none).
int run_diffusion_generate(const std::string& dir, const tokenizer::Tokenizer* tok, engine::RequestParams params,
                           const model::EngineOptions& opts, bool json, const std::string& unsupported);

}  // namespace fp4lm::cli
