// generation_config.json's request defaults (engine/sampling_defaults.h), the one reader behind
// the server's requests and /props and fp4lm.LLM's get_default_sampling_params.
#include <gtest/gtest.h>

#include <fstream>

#include "common/paths.h"
#include "core/error.h"
#include "engine/sampling_defaults.h"

namespace fp4lm::engine {
namespace {

void write(const std::filesystem::path& p, const std::string& text) { std::ofstream(p) << text; }

TEST(SamplingDefaults, VllmsKeysOfTheirJsonTypesOthersUnset) {
  fp4lm::test::TempDir dir;
  const SamplingDefaults none = read_sampling_defaults(dir.path().string());  // no file: no defaults
  EXPECT_FALSE(none.temperature || none.top_p || none.min_p || none.repetition_penalty || none.top_k ||
               none.max_tokens);
  write(dir / "generation_config.json",
        R"({"temperature": 0.6, "top_p": 1, "top_k": 20, "max_new_tokens": 7, "repetition_penalty": 1.05,
            "min_p": true, "do_sample": true, "eos_token_id": [1, 2]})");
  const SamplingDefaults d = read_sampling_defaults(dir.path().string());
  EXPECT_EQ(d.temperature.value_or(-1), 0.6);
  EXPECT_EQ(d.top_p.value_or(-1), 1.0);  // an integer is a number
  EXPECT_EQ(d.top_k.value_or(-1), 20);
  EXPECT_EQ(d.max_tokens.value_or(-1), 7);
  EXPECT_EQ(d.repetition_penalty.value_or(-1), 1.05);
  EXPECT_FALSE(d.min_p);  // JSON true is not a number
  write(dir / "generation_config.json", R"({"top_k": 2.5})");
  EXPECT_FALSE(read_sampling_defaults(dir.path().string()).top_k);  // not an integer
}

TEST(SamplingDefaults, AFileThatIsNotAJsonObjectIsAnErrorNamingIt) {
  fp4lm::test::TempDir dir;
  for (const char* text : {"[1, 2]", "{\"temperature\": "}) {
    write(dir / "generation_config.json", text);
    try {
      read_sampling_defaults(dir.path().string());
      FAIL() << text;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("generation_config.json"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace fp4lm::engine
