#include "io/json_file.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"

namespace fp4lm::io {

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open: {}", path, std::strerror(errno));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) fail("{}: read error", path);
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message already carries "line L, column C"; strip its "[json.exception...] "
    // prefix so the line reads as ours.
    std::string msg = e.what();
    if (auto p = msg.find("] "); msg.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      msg = msg.substr(p + 2);
    fail("{}: invalid JSON: {}", path, msg);
  }
}

std::string json_type_name(const nlohmann::json& j) {
  if (j.is_number_integer()) return "integer";
  if (j.is_number_float()) return "number";
  return j.type_name();
}

}  // namespace fp4lm::io
