#pragma once
// The vision tests' goldens (tests/vision/data, written by make_goldens.py from transformers 5.24
// and Pillow): the manifest and its files.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "io/json_file.h"

namespace fp4lm::vision::golden_data {

inline std::filesystem::path data_dir() { return test::source_dir() / "tests" / "vision" / "data"; }

inline nlohmann::json manifest() { return io::read_json_file((data_dir() / "manifest.json").string()); }

inline std::vector<uint8_t> bytes(const std::string& name) {
  const std::string s = test::read_file(data_dir() / name);
  return {s.begin(), s.end()};
}

inline std::vector<float> floats(const std::string& name) {
  const std::string s = test::read_file(data_dir() / name);
  std::vector<float> v(s.size() / sizeof(float));
  std::memcpy(v.data(), s.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace fp4lm::vision::golden_data
