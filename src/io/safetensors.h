#pragma once
// The safetensors format: an 8-byte little-endian header length N, N bytes of JSON header
// ({name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}), then the data
// area that the offsets index. Reading maps the file and hands out zero-copy views; nothing is
// used before the whole header has been validated. Writing is atomic (temp file + rename).
//
// Alignment: the data area of a file we write starts at a multiple of 8 and tensors are laid out
// by decreasing element size, so every view is naturally aligned. Files from elsewhere promise
// nothing: a view's data may be misaligned for its dtype, so read through memcpy (or check the
// pointer) before treating it as an array of T.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace fp4lm {
class MappedFile;
}

namespace fp4lm::io {

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;  // 100 MiB

struct TensorEntry {
  std::string name;
  TensorView view;
  size_t offset = 0;  // byte offset of the tensor in the data area (after the header)
};

class SafetensorsFile {
 public:
  // Maps `path` and validates its header (see parse_header). Throws fp4lm::Error naming the path.
  static std::shared_ptr<SafetensorsFile> open(const std::string& path);

  // Parses and validates the header of a whole safetensors file held in memory
  // (file[0 .. file_size)). Checks: header length <= file_size - 8 and <= 100 MiB; the header is
  // a JSON object without duplicate keys; every tensor has a known dtype, a shape of non-negative
  // integers, data_offsets [begin, end] inside the data area with end - begin == numel x size
  // (overflow-checked); no two tensors share a byte; `__metadata__` is a string -> string map.
  // Returns the tensors in data-offset order with views pointing into `file`. Every error is an
  // fp4lm::Error starting with "<path_for_errors>: " and naming the tensor / field.
  static std::vector<TensorEntry> parse_header(const uint8_t* file, size_t file_size,
                                               const std::string& path_for_errors,
                                               std::map<std::string, std::string>* metadata);

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }  // in data-offset order
  const TensorView* find(const std::string& name) const;                 // nullptr if absent
  const TensorView& get(const std::string& name) const;  // Error "<path>: tensor '<name>' not found"
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  ~SafetensorsFile();

 private:
  SafetensorsFile() = default;
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  std::vector<TensorEntry> tensors_;
  std::unordered_map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Builds a whole file in memory, then writes it atomically. For outputs too large to hold twice,
// use SafetensorsStreamWriter.
class SafetensorsWriter {
 public:
  // Each add() checks nbytes == numel x dtype_size and that the name is new (Error otherwise).
  void add(const std::string& name, DType dtype, Shape shape, const void* data, size_t nbytes);
  void add(const std::string& name, DType dtype, Shape shape, std::vector<uint8_t> bytes);
  template <class T>
  void add(const std::string& name, DType dtype, Shape shape, const std::vector<T>& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    add(name, dtype, std::move(shape), static_cast<const void*>(v.data()), v.size() * sizeof(T));
  }
  void set_metadata(std::map<std::string, std::string> m) { metadata_ = std::move(m); }
  // Writes to a temp file in the same directory, fsyncs, renames over `path`.
  void write(const std::string& path) const;

 private:
  struct Pending {
    std::string name;
    DType dtype;
    Shape shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Pending> tensors_;
  std::map<std::string, size_t> names_;
  std::map<std::string, std::string> metadata_;
};

// Streaming writer: the header comes from the declared layout; the data is then written tensor
// by tensor (in the declared order), so only one tensor need be in memory at a time.
class SafetensorsStreamWriter {
 public:
  using Layout = std::vector<std::tuple<std::string, DType, Shape>>;
  // Validates the layout (unique names, sizes representable), creates the temp file next to
  // `path` and writes the header.
  SafetensorsStreamWriter(const std::string& path, Layout layout,
                          std::map<std::string, std::string> metadata = {});
  // The next tensor of the declared layout; nbytes must equal its numel x dtype_size.
  void write_tensor(const std::string& name, const void* data, size_t nbytes);
  // All tensors written -> fsync, rename to `path`. Error if some tensor was not written.
  void finish();
  // Without a successful finish() the temp file is removed and `path` is untouched.
  ~SafetensorsStreamWriter();

  SafetensorsStreamWriter(const SafetensorsStreamWriter&) = delete;
  SafetensorsStreamWriter& operator=(const SafetensorsStreamWriter&) = delete;

 private:
  void abort() noexcept;
  struct Slot {
    std::string name;
    size_t nbytes;
    uint64_t file_offset;  // absolute position in the file
  };
  std::string path_;
  std::string temp_path_;
  int fd_ = -1;
  std::vector<Slot> slots_;  // declared order
  size_t next_ = 0;
  bool finished_ = false;
};

}  // namespace fp4lm::io
