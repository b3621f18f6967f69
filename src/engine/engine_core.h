#pragma once
// What the serving engine's thread (engine/engine.h) drives: the requests it has queued and one
// step of work over them. The continuous-batching Scheduler (token-by-token models) and the
// DiffusionQueue (DiffusionGemma, a canvas a step) are the two; the front ends see neither.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "engine/request.h"

namespace fp4lm::engine {

class EngineCore {
 public:
  using Outputs = std::vector<std::pair<int64_t, RequestOutput>>;
  virtual ~EngineCore() = default;
  // RequestError naming the parameter when the request can never run (any thread).
  virtual void check(const RequestParams& p) const = 0;
  // Queues a checked request; `id` unique among live requests.
  virtual void add(int64_t id, RequestParams p) = 0;
  // At the next step the request finishes with finish_reason "abort".
  virtual void cancel(int64_t id) = 0;
  virtual void cancel_all() = 0;
  virtual bool has_work() const = 0;
  // One step; never throws for a request's sake (a failing request finishes with "error").
  virtual Outputs step() = 0;
  // Every request finishes with finish_reason "error" and `why` (the engine's last resort).
  virtual Outputs fail_all(const std::string& why) = 0;
  virtual int64_t num_running() const = 0;
  virtual int64_t num_waiting() const = 0;
  virtual size_t kv_reserved_bytes() const = 0;
  virtual size_t kv_budget_bytes() const = 0;
  // What one sequence of `capacity` positions reserves.
  virtual size_t sequence_bytes(int64_t capacity) const = 0;
};

}  // namespace fp4lm::engine
