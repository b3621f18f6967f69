// `fp4lm convert`: a llama.cpp GGUF file -> a Hugging Face checkpoint directory
// (engine/convert/gguf_convert.h), which `fp4lm quantize` then takes to NVFP4.
#include <cstdio>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/command.h"
#include "core/error.h"
#include "core/interrupt_cleanup.h"
#include "engine/convert/gguf_convert.h"

namespace fp4lm::cli {
namespace {

struct ConvertArgs {
  std::string gguf, out, dtype = "bfloat16";
  bool force = false, verbose = false;
};

int run_convert(const ConvertArgs& a) {
  install_interrupt_cleanup();  // Ctrl-C removes the hidden temporary directory
  engine::ConvertOptions o;
  o.gguf_path = a.gguf;
  o.out_dir = a.out;
  o.force = a.force;
  if (a.dtype == "bfloat16") o.dtype = DType::BF16;
  else if (a.dtype == "float16") o.dtype = DType::F16;
  else if (a.dtype == "float32") o.dtype = DType::F32;
  else usage_fail("--dtype: '{}' is not supported (use bfloat16, float16 or float32)", a.dtype);
  const engine::ConvertSummary s = engine::convert_gguf(o);
  std::string types;
  for (const auto& [t, n] : s.source_types) types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", t, n);
  std::printf("Converted %s -> %s: %s, %zu tensors (%s) as %s, %.1f MiB%s; %zu metadata keys; %.2f s\n",
              a.gguf.c_str(), a.out.c_str(), s.architecture.c_str(), s.tensors, types.c_str(), a.dtype.c_str(),
              static_cast<double>(s.bytes) / (1 << 20), s.tied_embeddings ? ", tied embeddings" : "", s.keys.size(),
              s.seconds);
  if (a.verbose)
    for (const auto& [k, where] : s.keys) std::printf("  %s -> %s\n", k.c_str(), where.c_str());
  for (const std::string& n : s.not_converted) std::fprintf(stderr, "WARNING: not converted: %s\n", n.c_str());
  return 0;
}

CommandRegistration reg("convert", "Convert a llama.cpp GGUF file (llama architecture) to a Hugging Face checkpoint",
                        [](CLI::App& sub) {
  auto a = std::make_shared<ConvertArgs>();
  sub.add_option("--gguf", a->gguf, "Input .gguf file (F32/F16/BF16/Q8_0/Q4_0/Q4_1 tensors)")->required();
  sub.add_option("--out", a->out, "Output directory (must not exist unless --force)")->required();
  sub.add_option("--dtype", a->dtype, "Weights' dtype: bfloat16, float16 or float32")->capture_default_str();
  sub.add_flag("--force", a->force, "Replace OUT if it exists");
  sub.add_flag("--verbose", a->verbose, "List every metadata key and what became of it");
  return [a]() { return run_convert(*a); };
});

}  // namespace
}  // namespace fp4lm::cli
