#pragma once
// Where calibration tokens come from: a token-id file (JSON Lines, engine/id_file.h) or plain text
// encoded with the checkpoint's tokenizer.
#include <cstdint>
#include <string>
#include <vector>

namespace fp4lm::engine {

// The first `samples` sequences of the file, each cut to `seq_len` tokens (empty ones dropped).
// Error naming the file when none is left.
std::vector<std::vector<int32_t>> calibration_from_ids(const std::string& path, int64_t samples, int64_t seq_len);

// The whole text encoded with MODEL_DIR's tokenizer (tokenizer.json; Error if absent), then cut
// into consecutive windows of `seq_len` tokens, at most `samples` of them; each window starts with
// the tokenizer's BOS when it has one.
std::vector<std::vector<int32_t>> calibration_from_text(const std::string& path, const std::string& model_dir,
                                                        int64_t samples, int64_t seq_len);

// A chat dataset: JSON Lines, one conversation per line ({"messages": [{"role", "content"}, ...]}),
// each rendered with MODEL_DIR's chat template (tokenizer_config.json / chat_template.jinja),
// encoded, and cut to `seq_len` tokens; at most `samples` conversations. Error naming the file and
// line for a line that is not such an object.
std::vector<std::vector<int32_t>> calibration_from_chat(const std::string& path, const std::string& model_dir,
                                                        int64_t samples, int64_t seq_len);

// `--calib-text A B ...`: each file by its kind (a name ending in .jsonl is a chat dataset, any
// other plain text), in order, until `samples` sequences are taken.
std::vector<std::vector<int32_t>> calibration_from_files(const std::vector<std::string>& paths,
                                                         const std::string& model_dir, int64_t samples,
                                                         int64_t seq_len);

}  // namespace fp4lm::engine
