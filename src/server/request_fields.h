#pragma once
// Typed, bounded reads of JSON request fields: every reader either returns a value of the
// asked type inside the asked range or throws a 400 ApiError naming the field (a JSON library
// type error never reaches the client). Absent and null fields are "not given".
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4lm::server {

bool present(const nlohmann::json& obj, const char* key);

// An integer (5.0 counts, as in a JSON schema) inside [lo, hi]; `name` is the field as the error
// names it (defaults to `key`).
std::optional<int64_t> opt_int(const nlohmann::json& obj, const char* key,
                               int64_t lo = std::numeric_limits<int64_t>::min(),
                               int64_t hi = std::numeric_limits<int64_t>::max(), const std::string& name = {});
std::optional<double> opt_num(const nlohmann::json& obj, const char* key, const std::string& name = {});
std::optional<bool> opt_bool(const nlohmann::json& obj, const char* key, const std::string& name = {});
std::optional<std::string> opt_string(const nlohmann::json& obj, const char* key, const std::string& name = {});

// A list of token ids, each in [0, vocab).
std::vector<int32_t> token_ids(const nlohmann::json& list, const std::string& name, int64_t vocab);

}  // namespace fp4lm::server
