#pragma once
// `fp4lm convert`: a llama.cpp GGUF file in, a Hugging Face checkpoint directory out
// (config.json, model.safetensors, generation_config.json, tokenizer.json, tokenizer_config.json)
// that `fp4lm quantize`, `generate` and `serve` load like any HF download. Supported: the "llama"
// architecture (LlamaForCausalLM; tied embeddings when the file has no output.weight), weights
// in F32 / F16 / BF16 / Q8_0 / Q4_0 / Q4_1 (dequantized, quant/ggml_dequant.h, then rounded to
// the output dtype), q/k rows put back in HF's order (llama_qk_rows.h), the gpt2 (byte-level
// BPE) tokenizer with its chat template (gguf_tokenizer.h).
//
// Nothing in the file is dropped silently: every metadata key is used (ConvertSummary::keys says
// where it went), kept as a string in model.safetensors' __metadata__ (general.*, descriptive), or
// reported as not converted; a key of the architecture that is not understood, a tensor that is not
// mapped, or a type that cannot be decoded is an Error naming it. The output is written into a
// temporary directory beside OUT and renamed into place at the end.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace fp4lm::engine {

struct ConvertOptions {
  std::string gguf_path, out_dir;
  DType dtype = DType::BF16;  // BF16, F16 or F32
  bool force = false;         // replace an existing OUT
};

struct ConvertSummary {
  std::string architecture;                      // "LlamaForCausalLM"
  size_t tensors = 0;                            // written
  uint64_t bytes = 0;                            // of model.safetensors' tensors
  std::map<std::string, size_t> source_types;    // ggml type name -> tensors of it
  std::map<std::string, std::string> keys;       // every metadata key -> what became of it
  std::vector<std::string> not_converted;        // keys reported, not used (each with why)
  bool tied_embeddings = false;
  double seconds = 0;
};

ConvertSummary convert_gguf(const ConvertOptions& opts);

}  // namespace fp4lm::engine
