#pragma once
// The ModelOpt export fixtures (scripts/make_modelopt_goldens.py): where they are, the options the
// tests load them with, and the golden.json each carries (its tokens and transformers' float64
// logits of the exported tensors; "logits_w4a16" too where the export also has a W4A16 reading).
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "model/causal_lm.h"

namespace fp4lm::model {

inline std::filesystem::path modelopt_fixture(const char* name) {
  return test::source_dir() / "tests/model/fixtures" / name;
}

// float32 activations; `a16`: --override-activation-dtype (the checkpoint's activation
// quantization not applied); backends by name ("" = the oracle's choice).
inline EngineOptions modelopt_f32(bool a16 = false, const std::string& linear_backend = "",
                                  const std::string& moe_backend = "") {
  EngineOptions o;
  o.dtype = "float32";
  if (a16) o.override_activation_dtype = DType::F32;
  o.linear_backend = linear_backend;
  o.moe_backend = moe_backend;
  return o;
}

struct ModeloptGolden {
  std::vector<int32_t> tokens;
  std::vector<float> logits, logits_w4a16;  // [tokens, vocab] row-major; logits_w4a16 may be empty
};

inline ModeloptGolden modelopt_golden(const std::filesystem::path& dir) {
  const nlohmann::json g = nlohmann::json::parse(test::read_file(dir / "golden.json"));
  ModeloptGolden out{g.at("tokens").get<std::vector<int32_t>>(), {}, {}};
  auto rows = [&](const char* key, std::vector<float>& dst) {
    if (!g.contains(key)) return;
    for (const nlohmann::json& row : g[key])
      for (const nlohmann::json& v : row) dst.push_back(v.get<float>());
  };
  rows("logits", out.logits);
  rows("logits_w4a16", out.logits_w4a16);
  return out;
}

}  // namespace fp4lm::model
