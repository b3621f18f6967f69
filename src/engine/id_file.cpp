#include "engine/id_file.h"

#include <filesystem>
#include <fstream>
#include <istream>
#include <limits>
#include <system_error>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_file.h"

namespace fp4lm::engine {

using nlohmann::json;

std::vector<int32_t> IdRecord::all() const {
  std::vector<int32_t> v = prompt;
  v.insert(v.end(), continuation.begin(), continuation.end());
  return v;
}

namespace {
std::vector<int32_t> ids_of(const json& j, const std::string& where) {
  if (!j.is_array()) fail("{}: expected a list of token ids, found {}", where, j.type_name());
  std::vector<int32_t> out;
  out.reserve(j.size());
  for (const json& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > std::numeric_limits<int32_t>::max())
      fail("{}: token ids must be non-negative integers, found {}", where, v.dump());
    out.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return out;
}
// Reads one line (without its '\n') into `line`; false at the end of the file. A line longer than
// kMaxIdLineBytes is an error before it is held in memory.
bool read_line(std::istream& in, std::string& line, const std::string& path, int64_t no) {
  line.clear();
  std::streambuf* buf = in.rdbuf();
  bool any = false;
  for (int c; (c = buf->sbumpc()) != std::char_traits<char>::eof();) {
    any = true;
    if (c == '\n') return true;
    if (line.size() == kMaxIdLineBytes)
      fail("{}:{}: line longer than {} MiB; expected one sequence of token ids per line", path, no,
           kMaxIdLineBytes >> 20);
    line.push_back(static_cast<char>(c));
  }
  return any;
}
}  // namespace

std::vector<IdRecord> read_id_records(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    fail("{}: is a directory, expected a JSON Lines file of token ids", path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open", path);
  std::vector<IdRecord> out;
  std::string line;
  for (int64_t no = 1; read_line(in, line, path, no); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(no);
    json j = io::parse_json(line, where);
    IdRecord r;
    if (j.is_array()) {
      r.prompt = ids_of(j, where);
    } else if (j.is_object() && j.contains("ids")) {
      r.prompt = ids_of(j["ids"], where + " 'ids'");
    } else if (j.is_object() && j.contains("prompt_ids")) {
      r.prompt = ids_of(j["prompt_ids"], where + " 'prompt_ids'");
      for (const char* k : {"greedy_continuation", "greedy_ids"})
        if (j.contains(k)) r.continuation = ids_of(j[k], where + " '" + k + "'");
    } else {
      fail("{}: expected a list of ids or an object with 'ids' or 'prompt_ids'", where);
    }
    out.push_back(std::move(r));
  }
  if (in.bad()) fail("{}: read error", path);
  if (out.empty()) fail("{}: no token sequences (the file is empty or has only blank lines)", path);
  return out;
}

std::vector<std::vector<int32_t>> read_id_sequences(const std::string& path) {
  std::vector<std::vector<int32_t>> out;
  for (const IdRecord& r : read_id_records(path)) out.push_back(r.all());
  return out;
}

}  // namespace fp4lm::engine
