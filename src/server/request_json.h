#pragma once
// A request body as JSON, its integers read as integers: nlohmann's parser turns an integer
// literal outside [-2^63, 2^64) into the nearest double, so -9223372036854775809 would become
// exactly -2^63 and pass as a 64-bit integer (Python, and so vLLM, reads it exactly and refuses
// it). Here such a literal becomes a double strictly outside the int64 range (the next one below
// -2^63 when it rounds onto it), so every integer field refuses it with its range error while a
// number field still reads (nearly) the value Python's float() gives. Nesting is bounded as in
// io::parse_json.
#include <string_view>

#include <nlohmann/json.hpp>

namespace fp4lm::server {

// 400 ApiError on bad JSON ("the request body: invalid JSON: ... line L, column C").
nlohmann::json parse_request_json(std::string_view text);

}  // namespace fp4lm::server
