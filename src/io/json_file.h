#pragma once
// Every JSON the program reads (config.json, index files, quant configs, tokenizer files, chat
// messages, id files) is parsed here, with errors that name the file and the position of a syntax
// error, and with its nesting depth bounded before anything recursive (dump, copy, our own
// converters) can walk it.
#include <cstddef>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fp4lm::io {

// The deepest nesting accepted (objects and arrays; the top level is 1). Real files nest fewer
// than 20 levels; thousands overflow the stack of recursive JSON code.
inline constexpr int kMaxJsonDepth = 128;

// Parses `text`; `where` names it in errors ("<where>: invalid JSON: ... line L, column C",
// "<where>: invalid JSON: nested deeper than 128 levels"). `also`, when given, sees every parse
// event as nlohmann's parser callback does (and may throw its own Error).
nlohmann::json parse_json(std::string_view text, const std::string& where,
                          const nlohmann::json::parser_callback_t& also = nullptr);
// The same, keeping the key order of objects.
nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where);

// The whole file as text; "<path>: cannot open: ..." (also for a directory).
std::string read_text_file(const std::string& path);

// Python's json module writes the non-JSON constants Infinity, -Infinity and NaN (transformers'
// config.json: Nemotron-H's "time_step_limit": [0.0, Infinity]); outside strings they become
// ±1.7976931348623157e308 (the largest double: nlohmann refuses overflowing numbers) and null.
std::string python_json_constants(std::string_view text);

// parse_json(python_json_constants(read_text_file(path)), path): files on disk.
nlohmann::json read_json_file(const std::string& path);
nlohmann::ordered_json read_ordered_json_file(const std::string& path);

// For SAX parsers: Error "<where>: invalid JSON: nested deeper than ..." when `depth` open
// containers (the top level counts 1) exceed kMaxJsonDepth.
void check_json_depth(size_t depth, const std::string& where);

// "object", "array", "string", "number", ... for messages of the form "expected X, found Y".
std::string json_type_name(const nlohmann::json& j);

// Appends `s` as a JSON string literal the way Python's json.dumps(ensure_ascii=False) writes it
// (short escapes for " \\ \n \r \t \b \f, \u00XX for other control bytes, the rest as is):
// chat templates' tojson and tool-call arguments must match the Python side byte for byte.
void append_json_string(std::string_view s, std::string& out);

}  // namespace fp4lm::io
