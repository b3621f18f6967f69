#pragma once
// Values a pipeline stage computes once per forward step for the layers of later stages, besides
// the residual stream and shared K/V (model/state/stage_kv.h): Gemma 4's per-layer inputs, computed at
// layer 0 for every layer (arch/gemma_ple.h). The layer that owns them registers them with the
// loader (ModelLoader::carry_across_stages); the stage that computes them sends them with the
// step's residual stream, and every later stage takes them from the stage before and passes them
// on as they came.
//
// A step's message (StageLink): the shared K/V part alone when the model carries nothing else
// (so a stage of most models sends nothing beside its residual stream); otherwise u64 bytes of
// the K/V part, the K/V, then per carried value in registration order u64 bytes and the bytes.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace fp4lm::model {

class StageCarried {
 public:
  virtual ~StageCarried() = default;
  virtual const char* what() const = 0;  // for errors: "Gemma 4's per-layer inputs"
  // The step's bytes, `rows` tokens (computed by this stage or received by it).
  virtual std::span<const uint8_t> carried(int64_t rows) const = 0;
  // Takes a step's bytes from the stage before; error on a size other than `rows` tokens'.
  virtual void receive(std::span<const uint8_t> bytes, int64_t rows) = 0;
};

// The message of one step: the shared K/V part, then the carried values.
std::vector<uint8_t> join_stage_message(std::span<const uint8_t> kv,
                                        const std::vector<std::shared_ptr<StageCarried>>& carried, int64_t rows);
// Hands each carried value its part; returns the K/V part (a view into `msg`). Error on a
// message of another form.
std::span<const uint8_t> split_stage_message(std::span<const uint8_t> msg,
                                             const std::vector<std::shared_ptr<StageCarried>>& carried, int64_t rows);

}  // namespace fp4lm::model
