#pragma once
// The value checks every image processor's config reader shares: each returns the value of
// `key` (found in `where`) or fails naming the file, the key, what was expected and what was found.
#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace fp4lm::vision {

bool config_bool(const nlohmann::json& v, const std::string& where, const std::string& key);
// An integer in 1..most.
int64_t config_positive_int(const nlohmann::json& v, const std::string& where, const std::string& key, int64_t most);
double config_finite_number(const nlohmann::json& v, const std::string& where, const std::string& key);
// image_mean / image_std: one number for all channels, or three (R, G, B).
std::array<float, 3> config_rgb_triple(const nlohmann::json& v, const std::string& where, const std::string& key);
// Fails unless every channel of image_std (what pixels are divided by) is finite and non-zero.
void check_image_std(const std::array<float, 3>& image_std, const std::string& where);

}  // namespace fp4lm::vision
