#pragma once
// Which files of a model repo a run needs (docs/HUB.md): the configs, the tokenizer and chat
// template files, the processor configs, and the weights as the loader reads them
// (io/checkpoint.h: model.safetensors, else model.safetensors.index.json and the shards it
// names). Only files at the top level: never original/, *.gguf, *.pth or *.bin.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4lm::io::hub {

enum class Need { model, tokenizer_only };

// The files of `repo_files` a run needs before the index is read: every config, tokenizer and
// template file there is, plus model.safetensors or the index (for Need::model).
std::vector<std::string> base_files(const std::vector<std::string>& repo_files, Need need);
// The shards an index names (sorted, unique); Error naming `where` when the index is malformed
// or a shard is not in `repo_files`.
std::vector<std::string> shard_files(const nlohmann::json& index, const std::vector<std::string>& repo_files,
                                     const std::string& where);
// The files matching any of the shell patterns (fnmatch, '*' crossing '/' as huggingface_hub's
// allow_patterns do).
std::vector<std::string> matching_files(const std::vector<std::string>& repo_files,
                                        const std::vector<std::string>& patterns);
// Whether a snapshot folder holds what a run needs: config.json (model) or tokenizer files, and
// the weights (model.safetensors, or the index and every shard it names). "" when it does,
// else what is missing.
std::string missing_in_snapshot(const std::string& dir, Need need);

}  // namespace fp4lm::io::hub
