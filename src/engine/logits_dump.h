#pragma once
// Every position's logits of teacher-forced sequences, written out so that another
// implementation can be compared with fp4lm position by position (`fp4lm eval --dump-logits`,
// scripts/validate_transformers.py). Row t of a sequence is the model's output after reading
// tokens [0, t] — exactly what `model(input_ids).logits[0, t]` is in transformers.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/step_model.h"
#include "model/causal_lm.h"

namespace fp4lm::engine {

// [ids.size(), vocab] float32 logits (as CausalLM::forward returns them: rounded to the
// activation dtype). Error when the sequence is empty, longer than max_model_len, or holds an
// id outside the vocabulary.
std::vector<float> sequence_logits(const model::CausalLM& lm, const std::vector<int32_t>& ids);
// The same through a StepModel (one process or a pipeline: dist::PipelineStepModel's logits are
// the last stage's, bit for bit those of one process), in the same forward chunks.
std::vector<float> sequence_logits(StepModel& model, const std::vector<int32_t>& ids);

// JSON Lines, one object per sequence: {"sequence": i, "ids": [...], "vocab": V,
// "logits": [[V floats] per position]}; floats in the shortest form that reads back as the same
// float32. Error naming `path` when it cannot be written.
void write_logits_jsonl(const model::CausalLM& lm, const std::vector<std::vector<int32_t>>& sequences,
                        const std::string& path);
void write_logits_jsonl(StepModel& model, const std::vector<std::vector<int32_t>>& sequences, const std::string& path);

}  // namespace fp4lm::engine
