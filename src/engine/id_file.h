#pragma once
// Token-id files for eval and tests (JSON Lines). Each non-empty line is one sequence:
//   {"ids": [...]}                                  the sequence itself
//   {"prompt_ids": [...], "greedy_continuation": [...]} (or "greedy_ids")  concatenated
//   [...]                                           a bare list of ids
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace fp4lm::engine {

struct IdRecord {
  std::vector<int32_t> prompt;        // "prompt_ids" or "ids" or the bare list
  std::vector<int32_t> continuation;  // "greedy_continuation" / "greedy_ids" (may be empty)
  std::vector<int32_t> all() const;   // prompt + continuation
};

// The longest line accepted (a line is one sequence: 32 MiB holds millions of ids).
inline constexpr size_t kMaxIdLineBytes = size_t{32} << 20;

// Error naming the file and line on malformed JSON (nesting is bounded, io::kMaxJsonDepth), a
// line longer than kMaxIdLineBytes, a missing key or a non-integer id; Error naming the file when
// it is a directory or holds no sequence at all (empty, or only blank lines).
std::vector<IdRecord> read_id_records(const std::string& path);
std::vector<std::vector<int32_t>> read_id_sequences(const std::string& path);

}  // namespace fp4lm::engine
