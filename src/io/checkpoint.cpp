#include "io/checkpoint.h"

#include <filesystem>

#include "core/error.h"
#include "core/log.h"
#include "io/json_file.h"

namespace fp4lm::io {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string join(const std::string& dir, const std::string& name) {
  return (fs::path(dir) / name).string();
}

bool is_file(const std::string& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// An optional JSON file that, when present, must hold an object.
std::optional<nlohmann::json> read_optional_object(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return std::nullopt;
  nlohmann::json j = read_json_file(path);
  if (!j.is_object()) fail("{}: expected a JSON object, found {}", path, json_type_name(j));
  return j;
}

// Shard names come from a file: keep them inside the checkpoint directory.
void check_shard_name(const std::string& index_path, const std::string& tensor,
                      const std::string& shard) {
  fs::path p(shard);
  bool bad = shard.empty() || p.is_absolute();
  for (const auto& part : p)
    if (part == "..") bad = true;
  if (bad)
    fail("{}: tensor '{}': shard name '{}' must be a relative path inside the checkpoint "
         "directory",
         index_path, tensor, shard);
}

}  // namespace

std::shared_ptr<Checkpoint> Checkpoint::open(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail("{}: no such checkpoint directory", dir);
  if (!fs::is_directory(dir, ec)) fail("{}: not a directory (expected a checkpoint directory)", dir);

  std::shared_ptr<Checkpoint> ck(new Checkpoint());
  ck->dir_ = dir;

  std::string config_path = join(dir, "config.json");
  if (!fs::exists(config_path, ec))
    fail("{}: missing config.json (expected a Hugging Face checkpoint directory)", dir);
  ck->config_ = read_json_file(config_path);
  if (!ck->config_.is_object())
    fail("{}: expected a JSON object, found {}", config_path, json_type_name(ck->config_));
  ck->generation_config_ = read_optional_object(join(dir, "generation_config.json"));
  ck->hf_quant_config_ = read_optional_object(join(dir, "hf_quant_config.json"));

  std::string single = join(dir, kSingleFile), index = join(dir, kIndexFile);
  if (is_file(single)) {
    // transformers also prefers the single file when both exist.
    if (is_file(index)) log().warn("{}: both {} and {} exist; using {}", dir, kSingleFile, kIndexFile, kSingleFile);
    ck->load_single(single);
  } else if (is_file(index)) {
    ck->load_index(index);
  } else {
    fail("{}: no weights: expected {} or {}", dir, kSingleFile, kIndexFile);
  }
  return ck;
}

void Checkpoint::load_single(const std::string& file) {
  shards_.push_back(SafetensorsFile::open(file));
  for (const auto& e : shards_[0]->tensors()) tensors_.emplace(e.name, Where{0, &e.view, false, &e.view});
}

void Checkpoint::load_index(const std::string& index_path) {
  nlohmann::json index = read_json_file(index_path);
  if (!index.is_object())
    fail("{}: expected a JSON object, found {}", index_path, json_type_name(index));
  auto wm = index.find("weight_map");
  if (wm == index.end()) fail("{}: missing 'weight_map'", index_path);
  if (!wm->is_object())
    fail("{}: 'weight_map' must be an object (tensor -> shard file), found {}", index_path,
         json_type_name(*wm));

  // Shards in name order, each opened once.
  std::map<std::string, std::string> listed;        // tensor -> shard name
  std::map<std::string, std::string> first_tensor;  // shard name -> a tensor listed in it
  for (auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string())
      fail("{}: weight_map['{}'] must be a shard file name, found {}", index_path, tensor,
           json_type_name(shard));
    const auto& name = shard.get_ref<const std::string&>();
    check_shard_name(index_path, tensor, name);
    listed.emplace(tensor, name);
    first_tensor.emplace(name, tensor);
  }
  std::map<std::string, size_t> shard_index;  // shard name -> position in shards_
  for (const auto& [name, tensor] : first_tensor) {
    std::string path = join(dir_, name);
    if (!is_file(path))
      fail("{}: shard '{}' (listed for tensor '{}') does not exist: {}", index_path, name, tensor,
           path);
    shard_index.emplace(name, shards_.size());
    shards_.push_back(SafetensorsFile::open(path));
  }

  // Every stored tensor exactly once across the shards.
  for (size_t s = 0; s < shards_.size(); ++s) {
    for (const auto& e : shards_[s]->tensors()) {
      auto [it, inserted] = tensors_.emplace(e.name, Where{s, &e.view, false, &e.view});
      if (!inserted)
        fail("{}: tensor '{}' is stored in two shards, {} and {}; expected exactly one", dir_,
             e.name, shards_[it->second.shard]->path(), shards_[s]->path());
    }
  }
  // Every listed tensor where the index says it is.
  for (const auto& [tensor, name] : listed) {
    auto it = tensors_.find(tensor);
    const std::string& expected = shards_[shard_index.at(name)]->path();
    if (it == tensors_.end())
      fail("{}: tensor '{}' is listed in shard '{}' but not found in {}", index_path, tensor, name,
           expected);
    if (it->second.shard != shard_index.at(name))
      fail("{}: tensor '{}' is listed in shard '{}' but stored in {}", index_path, tensor, name,
           shards_[it->second.shard]->path());
  }
  // Stored but unlisted: the shard is the data, so keep it (as HF and vLLM do), but say so.
  size_t unlisted = 0;
  std::string example;
  for (const auto& [tensor, where] : tensors_)
    if (!listed.count(tensor) && unlisted++ == 0) example = tensor;
  if (unlisted)
    log().warn("{}: {} tensor(s) stored in the shards are missing from the index (e.g. '{}'); "
               "loading them anyway",
               index_path, unlisted, example);
}

void Checkpoint::alias_prefix(const std::string& from, const std::string& to) {
  std::vector<std::pair<std::string, Where>> add;
  for (const auto& [name, where] : tensors_)
    if (name.compare(0, from.size(), from) == 0) add.emplace_back(to + name.substr(from.size()), Where{where.shard, where.view, true, where.stored});
  for (auto& [name, where] : add) tensors_.emplace(name, where);
}

void Checkpoint::alias_slice(const std::string& name, const std::string& base, int64_t index, int64_t row0,
                             int64_t rows) {
  auto it = tensors_.find(base);
  if (it == tensors_.end()) fail("{}: tensor '{}' not found", dir_, base);
  const TensorView& b = *it->second.view;
  if (b.shape.size() != 3 || index < 0 || index >= b.shape[0] || row0 < 0 || rows <= 0 || row0 + rows > b.shape[1])
    fail("{}: tensor '{}' of shape {} has no slice [{}, {}:{}]", file_of(base), base, shape_str(b.shape), index, row0,
         row0 + rows);
  auto v = std::make_unique<TensorView>();
  v->dtype = b.dtype;
  v->shape = {rows, b.shape[2]};
  const size_t row_bytes = static_cast<size_t>(b.shape[2]) * dtype_size(b.dtype);
  v->data = b.data + (static_cast<size_t>(index * b.shape[1] + row0)) * row_bytes;
  v->nbytes = static_cast<size_t>(rows) * row_bytes;
  tensors_.insert_or_assign(name, Where{it->second.shard, v.get(), true, it->second.stored});
  slices_.push_back(std::move(v));
}

const TensorView* Checkpoint::find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second.view;
}

const TensorView& Checkpoint::get(const std::string& name) const {
  if (const TensorView* v = find(name)) return *v;
  fail("{}: tensor '{}' not found", dir_, name);
}

void Checkpoint::mark_used(const std::string& name) const {
  if (auto it = tensors_.find(name); it != tensors_.end()) used_.insert(it->second.stored);
}

std::vector<std::string> Checkpoint::unused_tensor_names() const {
  std::vector<std::string> names;
  for (const auto& [name, where] : tensors_)
    if (!where.alias && !used_.count(where.stored)) names.push_back(name);
  return names;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, where] : tensors_)
    if (!where.alias) names.push_back(name);
  return names;
}

std::string Checkpoint::file_of(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) fail("{}: tensor '{}' not found", dir_, name);
  return shards_[it->second.shard]->path();
}

size_t Checkpoint::total_tensor_bytes() const {
  size_t total = 0;
  for (const auto& [name, where] : tensors_)
    if (!where.alias) total += where.view->nbytes;
  return total;
}

}  // namespace fp4lm::io
