#pragma once
// The server's API key: where it comes from (--api-key, --api-key-file, FP4LM_API_KEY) and the
// check of a request's Authorization field, made on the raw field value (never percent-decoded)
// in time that does not depend on where a guess first differs.
#include <optional>
#include <string>
#include <string_view>

namespace fp4lm::server {

// a == b, in time that depends only on b's length (b: the secret side).
bool constant_time_equal(std::string_view a, std::string_view b);

// Whether `authorization` (the raw field value, or null when absent) is "Bearer <key>".
bool authorized(const std::string* authorization, const std::string& key);

// The key from at most one of: the flag's value, the file's first line, the environment
// variable's value; nullopt when none is given. A usage error (exit 2) naming the source when
// two are given, the key is empty, or it holds a character a header field cannot carry.
std::optional<std::string> resolve_api_key(const std::optional<std::string>& flag, const std::string& file,
                                           const char* env_value);

}  // namespace fp4lm::server
