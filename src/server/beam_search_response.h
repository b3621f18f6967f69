#pragma once
// use_beam_search requests: engine::beam_search per prompt (its one-token steps go through the
// batching engine like any request), each prompt's n best beams as its choices, answered as one
// JSON response in the endpoint's format (ResponseBuilder), never streamed.
#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "server/openai_request.h"
#include "server/serving_model.h"

namespace fp4lm::server {

// Blocks until every prompt's search is done. Error when a step fails or `cancelled` says stop.
nlohmann::json beam_search_response(const ApiRequest& req, const ServingModel& m, engine::Engine& engine,
                                    const std::string& id, int64_t created,
                                    const std::function<bool()>& cancelled = nullptr);

}  // namespace fp4lm::server
