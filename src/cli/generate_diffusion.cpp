#include "cli/generate_diffusion.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "engine/diffusion_generator.h"
#include "engine/process_stats.h"
#include "engine/request_error.h"
#include "engine/text_stream.h"
#include "model/diffusion_gemma.h"

namespace fp4lm::cli {

bool is_diffusion_checkpoint(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / "config.json");
  if (!in) return false;
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && model::is_diffusion_gemma(j);
}

int run_diffusion_generate(const std::string& dir, const tokenizer::Tokenizer* tok, engine::RequestParams params,
                           const model::EngineOptions& opts, bool json, const std::string& unsupported) {
  if (!unsupported.empty()) usage_fail("{}: DiffusionGemma does not support {}", dir, unsupported);
  // --dtype: the Linear / MoE layers' activation dtype (kernels' boundaries); norms, attention
  // and the loop stay float32.
  const auto m = model::DiffusionGemma::load(dir, opts);
  const engine::DiffusionSchedule sched =
      engine::parse_diffusion_schedule(m->generation_config(), dir + "/generation_config.json");
  bool first = true;
  // The run makes the text as the scheduler does (`serve` streams the same): incremental
  // detokenization, the ending EOS / stop id left out, a stop string cut with what follows.
  std::unique_ptr<engine::DiffusionRun> run;
  try {
    run = std::make_unique<engine::DiffusionRun>(*m, sched, params, tok);
    while (!run->done()) {
      const std::vector<int32_t> ids = run->next_block();
      const std::string t = run->take_text();
      if (json) continue;
      if (tok) std::fwrite(t.data(), 1, t.size(), stdout);
      else
        for (int32_t id : ids) std::printf("%s%d", std::exchange(first, false) ? "" : " ", id);
      std::fflush(stdout);
    }
  } catch (const engine::RequestError& e) {
    if (e.param.empty()) throw;
    // The CLI's spelling of the parameter.
    std::string flag = "--" + e.param;
    for (char& ch : flag)
      if (ch == '_') ch = '-';
    if (e.param == "prompt") throw UsageError(e.what());
    throw UsageError(flag + ": " + e.what());
  }
  const engine::DiffusionResult& r = run->result();
  if (json) {
    nlohmann::json j;
    j["prompt_ids"] = r.prompt_ids;
    j["output_ids"] = r.output_ids;
    j["text"] = run->text();
    j["finish_reason"] = r.finish_reason;
    j["stop_reason"] = r.stop_reason ? nlohmann::json(*r.stop_reason)
                       : r.stop_token ? nlohmann::json(*r.stop_token)
                                      : nlohmann::json(nullptr);
    j["diffusion"] = {{"canvases", r.canvases}, {"decoder_passes", r.decoder_passes}, {"early_stops", r.early_stops}};
    const double tok_s = r.decode_seconds > 0 ? static_cast<double>(r.output_ids.size()) / r.decode_seconds : 0;
    j["timings"] = {{"load_s", m->load_seconds()},
                    {"prefill_tok_s", r.prefill_seconds > 0 ? r.prompt_ids.size() / r.prefill_seconds : 0},
                    {"decode_tok_s", tok_s}};
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  } else {
    std::printf("\n");
  }
  std::fflush(stdout);
  log().info("DiffusionGemma: prompt {} tokens in {:.3f} s; {} tokens in {} canvases, {} decoder passes ({} early "
             "stops) in {:.3f} s; finish: {}; peak RSS {:.1f} MiB",
             r.prompt_ids.size(), r.prefill_seconds, r.output_ids.size(), r.canvases, r.decoder_passes, r.early_stops,
             r.decode_seconds, r.finish_reason, engine::peak_rss_bytes() / 1048576.0);
  return 0;
}

}  // namespace fp4lm::cli
