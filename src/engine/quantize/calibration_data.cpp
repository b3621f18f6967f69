#include "engine/quantize/calibration_data.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "engine/id_file.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4lm::engine {

namespace {
void check_limits(int64_t samples, int64_t seq_len) {
  if (samples <= 0) usage_fail("--calib-samples must be positive (got {})", samples);
  if (seq_len <= 1) usage_fail("--calib-seq-len must be at least 2 (got {})", seq_len);
}
}  // namespace

std::vector<std::vector<int32_t>> calibration_from_ids(const std::string& path, int64_t samples, int64_t seq_len) {
  check_limits(samples, seq_len);
  std::vector<std::vector<int32_t>> out;
  for (std::vector<int32_t>& s : read_id_sequences(path)) {
    if (static_cast<int64_t>(out.size()) == samples) break;
    if (s.empty()) continue;
    if (static_cast<int64_t>(s.size()) > seq_len) s.resize(static_cast<size_t>(seq_len));
    out.push_back(std::move(s));
  }
  if (out.empty()) fail("{}: no token sequences for calibration", path);
  return out;
}

std::vector<std::vector<int32_t>> calibration_from_text(const std::string& path, const std::string& model_dir,
                                                        int64_t samples, int64_t seq_len) {
  check_limits(samples, seq_len);
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json"))
    fail("{}: no tokenizer.json, so --calib-text cannot be encoded; give token ids with --calib-ids FILE.jsonl",
         model_dir);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the calibration text", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  if (text.empty()) fail("{}: the calibration text is empty", path);
  auto tok = tokenizer::Tokenizer::from_dir(model_dir);
  const std::vector<int32_t> ids = tok->encode(text, /*add_special_tokens=*/false);
  const std::optional<int32_t> bos = tok->bos_id();
  const int64_t body = seq_len - (bos ? 1 : 0);
  std::vector<std::vector<int32_t>> out;
  for (size_t p = 0; p < ids.size() && static_cast<int64_t>(out.size()) < samples; p += static_cast<size_t>(body)) {
    std::vector<int32_t> s;
    if (bos) s.push_back(*bos);
    const size_t end = std::min(ids.size(), p + static_cast<size_t>(body));
    s.insert(s.end(), ids.begin() + static_cast<std::ptrdiff_t>(p), ids.begin() + static_cast<std::ptrdiff_t>(end));
    out.push_back(std::move(s));
  }
  if (out.empty()) fail("{}: the calibration text encodes to no tokens", path);
  return out;
}

std::vector<std::vector<int32_t>> calibration_from_chat(const std::string& path, const std::string& model_dir,
                                                        int64_t samples, int64_t seq_len) {
  check_limits(samples, seq_len);
  if (!std::filesystem::exists(std::filesystem::path(model_dir) / "tokenizer.json"))
    fail("{}: no tokenizer.json, so the chat dataset {} cannot be encoded", model_dir, path);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot read the calibration chat dataset", path);
  auto tok = tokenizer::Tokenizer::from_dir(model_dir);
  const tokenizer::ChatTemplate tmpl = tokenizer::ChatTemplate::from_dir(model_dir);
  std::vector<std::vector<int32_t>> out;
  std::string line;
  for (int64_t ln = 1; std::getline(in, line) && static_cast<int64_t>(out.size()) < samples; ++ln) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::ordered_json j;
    try {
      j = nlohmann::ordered_json::parse(line);
    } catch (const std::exception& e) {
      fail("{}:{}: not JSON: {}", path, ln, e.what());
    }
    if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array() || j["messages"].empty())
      fail("{}:{}: expected an object with a non-empty \"messages\" array", path, ln);
    std::string text;
    try {
      text = tmpl.render_ordered(j["messages"], nullptr, tokenizer::ChatOptions{});
    } catch (const std::exception& e) {
      fail("{}:{}: the chat template cannot render this conversation: {}", path, ln, e.what());
    }
    std::vector<int32_t> ids = tok->encode(text, /*add_special_tokens=*/false);
    if (ids.empty()) continue;
    if (static_cast<int64_t>(ids.size()) > seq_len) ids.resize(static_cast<size_t>(seq_len));
    out.push_back(std::move(ids));
  }
  if (out.empty()) fail("{}: no conversations for calibration", path);
  return out;
}

std::vector<std::vector<int32_t>> calibration_from_files(const std::vector<std::string>& paths,
                                                         const std::string& model_dir, int64_t samples,
                                                         int64_t seq_len) {
  check_limits(samples, seq_len);
  std::vector<std::vector<int32_t>> out;
  for (const std::string& p : paths) {
    const int64_t left = samples - static_cast<int64_t>(out.size());
    if (left <= 0) break;
    std::vector<std::vector<int32_t>> part = p.ends_with(".jsonl") ? calibration_from_chat(p, model_dir, left, seq_len)
                                                                   : calibration_from_text(p, model_dir, left, seq_len);
    for (auto& s : part) out.push_back(std::move(s));
  }
  if (out.empty()) fail("--calib-text: no files given");
  return out;
}

}  // namespace fp4lm::engine
