#pragma once
// A Hugging Face checkpoint directory: config.json, optional generation_config.json and
// hf_quant_config.json (ModelOpt), and the weights in a single model.safetensors or in shards
// listed by model.safetensors.index.json. Opening validates every file; tensors are zero-copy
// views into the mapped shards, alive as long as the Checkpoint.
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace fp4lm::io {

class Checkpoint {
 public:
  // Throws fp4lm::Error naming the file and the tensor/field on any inconsistency:
  // missing or malformed config.json (must be an object), index entries naming missing shards,
  // a tensor listed in one shard but stored in another, a tensor stored in two shards.
  // A tensor stored in a listed shard but absent from the index is loaded with a warning (the
  // shard is the data; HF and vLLM load every tensor of the listed shards too).
  static std::shared_ptr<Checkpoint> open(const std::string& dir);

  const std::string& dir() const { return dir_; }
  const nlohmann::json& config() const { return config_; }
  const std::optional<nlohmann::json>& generation_config() const { return generation_config_; }
  const std::optional<nlohmann::json>& hf_quant_config() const { return hf_quant_config_; }

  // Makes every tensor named `from`<rest> also findable as `to`<rest> (unless that name exists):
  // a VL checkpoint's text model under "model.language_model." read as "model.".
  void alias_prefix(const std::string& from, const std::string& to);
  // Makes rows [row0, row0 + shape[0]) of the leading-dimension slice `index` of the stored
  // tensor `base` (3-D [N, R, C]) findable as `name` with shape {rows, C}, a view without copy:
  // an expert of a fused gate_up_proj / down_proj read as the per-expert 2-D tensor it holds.
  // Like alias_prefix names, it is not listed by tensor_names(). Error when out of range.
  void alias_slice(const std::string& name, const std::string& base, int64_t index, int64_t row0, int64_t rows);

  const TensorView* find(const std::string& name) const;  // nullptr if absent
  // Records that the model consumed `name` (the stored tensor behind an alias_prefix name or an
  // alias_slice view): the load rule (model/load/tensor_usage.h) lists what no layer consumed. find()
  // alone records nothing: probing a name to decide a format is not using it. No-op if absent.
  void mark_used(const std::string& name) const;
  // Stored tensors (tensor_names()) that no mark_used reached, sorted.
  std::vector<std::string> unused_tensor_names() const;
  const TensorView& get(const std::string& name) const;  // Error "<dir>: tensor '<name>' not found"
  std::vector<std::string> tensor_names() const;         // sorted; as stored (no alias_prefix names)
  std::string file_of(const std::string& name) const;    // path of the shard holding it
  size_t total_tensor_bytes() const;
  const std::vector<std::shared_ptr<SafetensorsFile>>& shards() const { return shards_; }

 private:
  Checkpoint() = default;
  void load_single(const std::string& file);
  void load_index(const std::string& index_path);
  struct Where {
    size_t shard;
    const TensorView* view;
    bool alias = false;  // added by alias_prefix
    const TensorView* stored = nullptr;  // the stored tensor it reads (itself unless a slice)
  };
  std::string dir_;
  nlohmann::json config_;
  std::optional<nlohmann::json> generation_config_;
  std::optional<nlohmann::json> hf_quant_config_;
  std::vector<std::shared_ptr<SafetensorsFile>> shards_;
  std::map<std::string, Where> tensors_;
  std::vector<std::unique_ptr<TensorView>> slices_;  // the views alias_slice made
  mutable std::set<const TensorView*> used_;          // stored views mark_used reached
};

}  // namespace fp4lm::io
