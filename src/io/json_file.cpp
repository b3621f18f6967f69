#include "io/json_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace fp4lm::io {

namespace {

// nlohmann's message already carries "line L, column C"; strip its "[json.exception...] " prefix
// so the line reads as ours.
std::string plain_message(const nlohmann::json::exception& e) {
  std::string msg = e.what();
  if (auto p = msg.find("] "); msg.rfind("[json.exception", 0) == 0 && p != std::string::npos)
    msg = msg.substr(p + 2);
  return msg;
}

template <typename Json>
Json parse_bounded(std::string_view text, const std::string& where,
                   const typename Json::parser_callback_t& also) {
  // The callback's depth is the number of containers already open around the event, so an
  // object_start at depth d opens level d + 1. The parser itself is iterative; refusing here
  // keeps the DOM shallow for everything that walks it later.
  auto cb = [&](int depth, typename Json::parse_event_t ev, Json& parsed) -> bool {
    if (ev == Json::parse_event_t::object_start || ev == Json::parse_event_t::array_start)
      check_json_depth(static_cast<size_t>(depth) + 1, where);
    return also ? also(depth, ev, parsed) : true;
  };
  try {
    return Json::parse(text.begin(), text.end(), cb);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: invalid JSON: {}", where, plain_message(e));
  }
}

}  // namespace

void check_json_depth(size_t depth, const std::string& where) {
  if (depth > static_cast<size_t>(kMaxJsonDepth))
    fail("{}: invalid JSON: nested deeper than {} levels", where, kMaxJsonDepth);
}

nlohmann::json parse_json(std::string_view text, const std::string& where,
                          const nlohmann::json::parser_callback_t& also) {
  return parse_bounded<nlohmann::json>(text, where, also);
}

nlohmann::ordered_json parse_ordered_json(std::string_view text, const std::string& where) {
  return parse_bounded<nlohmann::ordered_json>(text, where, nullptr);
}

std::string read_text_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail("{}: cannot open: is a directory, expected a file", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open: {}", path, std::strerror(errno));
  in.seekg(0, std::ios::end);
  const std::streamoff n = in.tellg();
  if (n < 0) fail("{}: cannot read: not a regular file", path);
  std::string s(static_cast<size_t>(n), '\0');
  in.seekg(0);
  in.read(s.data(), n);
  if (!in) fail("{}: read error", path);
  return s;
}

std::string python_json_constants(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (in_string) {
      out += ch;
      if (ch == '\\' && i + 1 < text.size()) out += text[++i];
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') in_string = true;
    auto at = [&](std::string_view word) { return text.substr(i, word.size()) == word; };
    if (at("-Infinity")) {
      out += "-1.7976931348623157e308";
      i += 8;
    } else if (at("Infinity")) {
      out += "1.7976931348623157e308";
      i += 7;
    } else if (at("NaN")) {
      out += "null";
      i += 2;
    } else {
      out += ch;
    }
  }
  return out;
}

nlohmann::json read_json_file(const std::string& path) {
  return parse_json(python_json_constants(read_text_file(path)), path);
}

nlohmann::ordered_json read_ordered_json_file(const std::string& path) {
  return parse_ordered_json(read_text_file(path), path);
}

std::string json_type_name(const nlohmann::json& j) {
  if (j.is_number_integer()) return "integer";
  if (j.is_number_float()) return "number";
  return j.type_name();
}

void append_json_string(std::string_view s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += static_cast<char>(c);
    }
  }
  out += '"';
}

}  // namespace fp4lm::io
