#include "engine/mm_limits.h"

#include <cstdint>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"

namespace fp4lm::engine {

namespace {
// Every modality's count (image, video, audio; the default when not named), checked.
std::map<std::string, int64_t> limits_of(const nlohmann::json& j, const std::string& option) {
  if (!j.is_object())
    throw UsageError(fmt::format("{}: expected a JSON object such as {{\"image\": 2}}, got {}", option, j.dump()));
  std::map<std::string, int64_t> out = {{"image", kDefaultImageLimit}, {"video", kDefaultImageLimit}, {"audio", 0}};
  for (const auto& [k, v] : j.items()) {
    if (k != "image" && k != "video" && k != "audio")
      throw UsageError(fmt::format("{}: unknown modality '{}' (image, video or audio)", option, k));
    const nlohmann::json* count = &v;
    if (v.is_object()) {
      for (const auto& [ok, ov] : v.items())
        if (ok != "count") throw UsageError(fmt::format("{}: '{}.{}': only 'count' is read", option, k, ok));
      if (!v.contains("count")) throw UsageError(fmt::format("{}: '{}' needs a 'count'", option, k));
      count = &v["count"];
    }
    const bool in_range = count->is_number_unsigned() ? count->get<uint64_t>() <= INT64_MAX
                                                      : count->is_number_integer() && count->get<int64_t>() >= 0;
    if (!in_range)
      throw UsageError(fmt::format("{}: '{}' must be a count >= 0, got {}", option, k, count->dump()));
    out[k] = count->get<int64_t>();
  }
  return out;
}

nlohmann::json parse_limits(const std::string& text, const std::string& option) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception&) {
    throw UsageError(fmt::format("{}: '{}' is not JSON; expected e.g. '{{\"image\": 2}}'", option, text));
  }
  return j;
}
}  // namespace

int64_t image_limit(const nlohmann::json& j, const std::string& option, bool videos_taken) {
  const auto limits = limits_of(j, option);
  for (const char* k : {"video", "audio"}) {
    const int64_t n = j.contains(k) ? limits.at(k) : 0;
    if (n > 0 && !(videos_taken && std::string(k) == "video"))
      log().warn("{}: the {} limit ({}) has no effect: fp4lm takes images only, a request's {} input is refused",
                 option, k, n, k);
  }
  return limits.at("image");
}

int64_t image_limit(const std::string& text, const std::string& option, bool videos_taken) {
  if (text.empty()) return kDefaultImageLimit;
  return image_limit(parse_limits(text, option), option, videos_taken);
}

int64_t video_limit(const std::string& text, const std::string& option) {
  if (text.empty()) return kDefaultImageLimit;
  return limits_of(parse_limits(text, option), option).at("video");
}

}  // namespace fp4lm::engine
