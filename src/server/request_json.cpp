#include "server/request_json.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/error.h"
#include "io/json_file.h"
#include "server/api_error.h"

namespace fp4lm::server {

using nlohmann::json;

namespace {

constexpr const char* kWhere = "the request body";

// nlohmann's SAX events into a DOM, as its own DOM parser builds it, with the number_float
// event's lexeme looked at.
class ExactIntegerBuilder {
 public:
  json root;

  bool null() { return put(nullptr); }
  bool boolean(bool v) { return put(v); }
  bool number_integer(json::number_integer_t v) { return put(v); }
  bool number_unsigned(json::number_unsigned_t v) { return put(v); }
  bool number_float(json::number_float_t v, const std::string& lexeme) {
    // No '.', 'e' or 'E': an integer literal the lexer could not hold in 64 bits.
    const bool integer_literal = lexeme.find_first_of(".eE") == std::string::npos;
    if (integer_literal && v == -0x1p63) v = std::nextafter(v, -std::numeric_limits<double>::infinity());
    return put(v);
  }
  bool string(std::string& v) { return put(std::move(v)); }
  bool binary(json::binary_t& v) { return put(std::move(v)); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool key(std::string& k) {
    slot_ = &(*stack_.back())[k];
    return true;
  }
  bool end_object() { return close(); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t, const std::string&, const json::exception& e) {
    // nlohmann's message carries "line L, column C"; its "[json.exception...] " prefix goes.
    std::string msg = e.what();
    if (auto p = msg.find("] "); msg.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      msg = msg.substr(p + 2);
    throw bad_request(fmt::format("{}: invalid JSON: {}", kWhere, msg));
  }

 private:
  // Where a value goes: the root, the open array's end, or the slot of the last key.
  json* put_at(json&& v) {
    if (stack_.empty()) {
      root = std::move(v);
      return &root;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }
  bool put(json v) {
    put_at(std::move(v));
    return true;
  }
  bool open(json container) {
    try {
      io::check_json_depth(stack_.size() + 1, kWhere);
    } catch (const Error& e) {
      throw bad_request(e.what());
    }
    // An open container is never moved: its array parent grows only after it closes.
    stack_.push_back(put_at(std::move(container)));
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  std::vector<json*> stack_;
  json* slot_ = nullptr;
};

}  // namespace

json parse_request_json(std::string_view text) {
  ExactIntegerBuilder b;
  try {
    json::sax_parse(text.begin(), text.end(), &b);
  } catch (const json::exception& e) {
    throw bad_request(fmt::format("{}: invalid JSON: {}", kWhere, e.what()));
  }
  return std::move(b.root);
}

}  // namespace fp4lm::server
