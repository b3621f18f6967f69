#include "common/checkpoint_edit.h"

#include "io/safetensors.h"

namespace fp4lm::test {

void edit_tensors(const std::filesystem::path& dir, const std::function<bool(EditedTensor&)>& edit,
                  std::vector<EditedTensor> extra) {
  const std::string path = (dir / "model.safetensors").string();
  std::vector<EditedTensor> tensors;
  {
    auto file = io::SafetensorsFile::open(path);
    for (const auto& e : file->tensors())
      tensors.push_back({e.name, e.view.dtype, e.view.shape,
                         std::vector<uint8_t>(e.view.data, e.view.data + e.view.nbytes)});
  }
  io::SafetensorsWriter w;
  for (auto& t : tensors)
    if (edit(t)) w.add(t.name, t.dtype, t.shape, std::move(t.bytes));
  for (auto& t : extra) w.add(t.name, t.dtype, t.shape, std::move(t.bytes));
  w.write(path);
}

void copy_dir(const std::filesystem::path& from, const std::filesystem::path& to) {
  std::filesystem::create_directories(to);
  for (const auto& e : std::filesystem::directory_iterator(from))
    if (e.is_regular_file()) std::filesystem::copy_file(e.path(), to / e.path().filename());
}

}  // namespace fp4lm::test
