#pragma once
// Test helpers that derive broken or unusual checkpoints from a good one.
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fp4lm::test {

struct EditedTensor {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
};

// Rewrites dir/model.safetensors: `edit` sees every tensor and may change it in place or
// return false to drop it; `extra` tensors are added.
void edit_tensors(const std::filesystem::path& dir, const std::function<bool(EditedTensor&)>& edit,
                  std::vector<EditedTensor> extra = {});

// Copies a checkpoint directory (files only).
void copy_dir(const std::filesystem::path& from, const std::filesystem::path& to);

}  // namespace fp4lm::test
