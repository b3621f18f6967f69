#pragma once
// vLLM's limit_mm_per_prompt, read by one rule for `fp4lm serve --limit-mm-per-prompt` and
// `fp4lm.LLM(limit_mm_per_prompt=...)`: a JSON object of modality → count, the count an integer
// >= 0 or {"count": N}. fp4lm takes images only; a video or audio limit is accepted (vLLM command
// lines for the Qwen VL models carry them) and, when above 0, said in one WARN line to have no
// effect (a request's video / audio parts are refused by name). Anything else is a UsageError
// naming `option` and the key.
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace fp4lm::engine {

// vLLM's default when the limit does not name a modality.
inline constexpr int64_t kDefaultImageLimit = 999;

// The most images one prompt may carry. `videos_taken`: the caller takes video frames
// (fp4lm.LLM, Qwen3-VL), so a video limit is not said to have no effect.
int64_t image_limit(const nlohmann::json& limits, const std::string& option, bool videos_taken = false);

// The same from the JSON text (the server's flag); empty text: kDefaultImageLimit.
int64_t image_limit(const std::string& json_text, const std::string& option, bool videos_taken = false);

// The most videos one prompt may carry (fp4lm.LLM's video frames), read by the same rule; vLLM's
// default of 999 when not named. Errors as image_limit's.
int64_t video_limit(const std::string& json_text, const std::string& option);

}  // namespace fp4lm::engine
