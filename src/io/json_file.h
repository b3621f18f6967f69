#pragma once
// Reading small JSON files (config.json, index files, quant configs) with errors that name the
// file and the position of a syntax error.
#include <string>

#include <nlohmann/json.hpp>

namespace fp4lm::io {

// Throws fp4lm::Error "<path>: cannot open: ..." or "<path>: invalid JSON: ... line L, column C".
nlohmann::json read_json_file(const std::string& path);

// "object", "array", "string", "number", ... for messages of the form "expected X, found Y".
std::string json_type_name(const nlohmann::json& j);

}  // namespace fp4lm::io
