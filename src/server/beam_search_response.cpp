#include "server/beam_search_response.h"

#include <algorithm>

#include "engine/beam_search.h"
#include "server/openai_response.h"

namespace fp4lm::server {

nlohmann::json beam_search_response(const ApiRequest& req, const ServingModel& m, engine::Engine& engine,
                                    const std::string& id, int64_t created, const std::function<bool()>& cancelled) {
  ResponseBuilder rb(req, m, id, created);
  const engine::SubmitFn submit = [&](engine::RequestParams p) { return engine.submit(std::move(p)); };
  const size_t n = static_cast<size_t>(req.n);
  for (size_t pi = 0; pi < req.prompts.size(); ++pi) {
    const ApiRequest::Prompt& prompt = req.prompts[pi];
    engine::BeamSearchParams bp = req.beam_params;
    bp.max_tokens = prompt.max_tokens;
    const std::vector<engine::BeamSequence> beams = engine::beam_search(submit, prompt.ids, bp, m.eos_ids, cancelled);
    for (size_t i = 0; i < n && i < beams.size(); ++i) {
      const engine::BeamSequence& b = beams[i];
      engine::RequestOutput o;
      o.token_ids = b.tokens;
      o.text = m.tok ? m.tok->decode(b.tokens, req.params.skip_special_tokens) : std::string();
      if (req.logprobs) {
        // The step's top entries, cut to what the request asked for.
        for (engine::TokenLogprob lp : b.logprobs) {
          lp.top.resize(std::min(lp.top.size(), static_cast<size_t>(std::max<int64_t>(0, req.top_logprobs))));
          o.logprobs.push_back(std::move(lp));
        }
      }
      o.finished = true;
      o.finish_reason = b.eos ? "stop" : "length";
      o.prompt_tokens = static_cast<int64_t>(prompt.ids.size());
      o.completion_tokens = static_cast<int64_t>(b.tokens.size());
      rb.add(pi * n + i, o);
    }
  }
  return rb.response();
}

}  // namespace fp4lm::server
