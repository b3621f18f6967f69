// generation_config.json's request defaults (engine/sampling_defaults.h), the one reader behind
// the server's requests and /props and fp4lm.LLM's get_default_sampling_params. The file itself is
// parsed (and refused when malformed) by io::Checkpoint at load: tests/io/checkpoint_test.cpp.
#include <gtest/gtest.h>

#include "engine/sampling_defaults.h"

namespace fp4lm::engine {
namespace {

SamplingDefaults from(const char* text) { return sampling_defaults_from(nlohmann::json::parse(text)); }

TEST(SamplingDefaults, VllmsKeysOfTheirJsonTypesOthersUnset) {
  const SamplingDefaults none = sampling_defaults_from(std::nullopt);  // the checkpoint has none
  EXPECT_FALSE(none.temperature || none.top_p || none.min_p || none.repetition_penalty || none.top_k ||
               none.max_tokens);
  const SamplingDefaults d =
      from(R"({"temperature": 0.6, "top_p": 1, "top_k": 20, "max_new_tokens": 7, "repetition_penalty": 1.05,
               "min_p": true, "do_sample": true, "eos_token_id": [1, 2]})");
  EXPECT_EQ(d.temperature.value_or(-1), 0.6);
  EXPECT_EQ(d.top_p.value_or(-1), 1.0);  // an integer is a number
  EXPECT_EQ(d.top_k.value_or(-1), 20);
  EXPECT_EQ(d.max_tokens.value_or(-1), 7);
  EXPECT_EQ(d.repetition_penalty.value_or(-1), 1.05);
  EXPECT_FALSE(d.min_p);  // JSON true is not a number
  EXPECT_FALSE(from(R"({"top_k": 2.5})").top_k);  // not an integer
  EXPECT_FALSE(from(R"({"top_p": "0.9"})").top_p);  // a string is not a number
}

// The max_tokens a request without one gets, in the server and fp4lm.LLM alike: the rest of the
// context, whole canvases for a DiffusionGemma, lowered by a cap, never below 1.
TEST(DefaultMaxTokens, TheRestOfTheContextCappedAndAtLeastOne) {
  EXPECT_EQ(default_max_tokens(64, 10, 0), 54);
  EXPECT_EQ(default_max_tokens(64, 10, 0, 16), 16);       // the completions endpoint's 16
  EXPECT_EQ(default_max_tokens(64, 60, 0, 16), 4);        // the context wins over a larger cap
  EXPECT_EQ(default_max_tokens(64, 10, 16), 48);          // three whole canvases of 16 (54 left)
  EXPECT_EQ(default_max_tokens(64, 10, 16, 20), 20);      // a cap inside the canvases
  EXPECT_EQ(default_max_tokens(64, 64, 0), 1);            // full: the validator names the prompt
  EXPECT_EQ(default_max_tokens(64, 100, 0), 1);
  EXPECT_EQ(default_max_tokens(64, 10, 0, 0), 1);
}

}  // namespace
}  // namespace fp4lm::engine
