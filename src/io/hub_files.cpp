#include "io/hub_files.h"

#include <algorithm>
#include <filesystem>
#include <fnmatch.h>
#include <set>

#include "core/error.h"
#include "io/json_file.h"

namespace fp4lm::io::hub {
namespace fs = std::filesystem;
namespace {

constexpr const char* kIndex = "model.safetensors.index.json";
constexpr const char* kSingle = "model.safetensors";

// Everything a run reads besides the weights (configs, tokenizer, chat templates, processors).
const std::set<std::string> kTokenizerFiles = {
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json", "vocab.json",
    "merges.txt", "tokenizer.model", "chat_template.jinja", "chat_template.json"};
const std::set<std::string> kModelFiles = {
    "config.json", "generation_config.json", "hf_quant_config.json", "quantization_config.json",
    "preprocessor_config.json", "processor_config.json", "video_preprocessor_config.json"};

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

}  // namespace

std::vector<std::string> base_files(const std::vector<std::string>& repo_files, Need need) {
  std::vector<std::string> out;
  for (const std::string& f : repo_files)
    if (kTokenizerFiles.count(f) || (need == Need::model && kModelFiles.count(f))) out.push_back(f);
  if (need == Need::model) {
    if (contains(repo_files, kSingle)) out.push_back(kSingle);  // as the loader: the single file wins
    else if (contains(repo_files, kIndex)) out.push_back(kIndex);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> shard_files(const nlohmann::json& index, const std::vector<std::string>& repo_files,
                                     const std::string& where) {
  auto wm = index.is_object() ? index.find("weight_map") : index.end();
  if (wm == index.end() || !wm->is_object()) fail("{}: no 'weight_map' object", where);
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string()) fail("{}: weight_map['{}'] is not a file name", where, tensor);
    const std::string s = shard.get<std::string>();
    if (!contains(repo_files, s)) fail("{}: shard '{}' (for tensor '{}') is not in the repo", where, s, tensor);
    shards.insert(s);
  }
  return {shards.begin(), shards.end()};
}

std::vector<std::string> matching_files(const std::vector<std::string>& repo_files,
                                        const std::vector<std::string>& patterns) {
  std::vector<std::string> out;
  for (const std::string& f : repo_files)
    for (const std::string& p : patterns)
      if (fnmatch(p.c_str(), f.c_str(), 0) == 0 || (p.back() == '/' && f.rfind(p, 0) == 0)) {
        out.push_back(f);
        break;
      }
  return out;
}

std::string missing_in_snapshot(const std::string& dir, Need need) {
  const fs::path d = dir;
  std::error_code ec;
  if (need == Need::tokenizer_only)
    return fs::exists(d / "tokenizer.json", ec) || fs::exists(d / "tokenizer_config.json", ec) ? ""
                                                                                                : "tokenizer.json";
  if (!fs::exists(d / "config.json", ec)) return "config.json";
  if (fs::exists(d / kSingle, ec)) return "";
  if (!fs::exists(d / kIndex, ec)) return kSingle;
  const nlohmann::json index = read_json_file((d / kIndex).string());
  auto wm = index.is_object() ? index.find("weight_map") : index.end();
  if (wm == index.end() || !wm->is_object()) return "";  // the loader names what is wrong
  for (const auto& [tensor, shard] : wm->items())
    if (shard.is_string() && !fs::exists(d / shard.get<std::string>(), ec)) return shard.get<std::string>();
  return "";
}

}  // namespace fp4lm::io::hub
