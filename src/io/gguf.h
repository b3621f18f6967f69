#pragma once
// GGUF (llama.cpp's single-file model format), read-only: a little-endian header
// ("GGUF", version 2 or 3, tensor count, metadata count), the metadata key/value pairs, the
// tensor infos (name, dims fastest-first, ggml type, offset into the data area), then the data
// area at the next multiple of `general.alignment` (default 32). The file is mapped; nothing is
// handed out before the whole header has been validated (magic, version, counts against the
// file size, value types, string and array lengths, duplicate keys and tensor names, alignment,
// each tensor's type, shape, offset alignment and bounds, no two tensors sharing a byte).
// What the tensors and keys mean is the converter's business (engine/convert/).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace fp4lm {
class MappedFile;
}

namespace fp4lm::io {

// ggml's tensor element types (the ids are ggml's). Only those whose block layout this reader
// knows are accepted; the others are an error naming the tensor and the type id.
enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ4_NL = 20, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, BF16 = 30,
};

struct GgmlTypeInfo {
  const char* name;      // "Q4_1", as ggml spells it
  uint32_t block_elems;  // elements per block (1 for plain types)
  uint32_t block_bytes;  // bytes per block
};
// nullptr for a type id whose layout is not known here.
const GgmlTypeInfo* ggml_type_info(uint32_t type);

// GGUF metadata value types (the ids are the format's).
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GgufType t);  // "u32", "string", "array", ...

struct GgufKv {
  std::string key;
  GgufType type;
  GgufType elem_type = GgufType::U8;  // of an array (its elements); unused otherwise
  // The value: integers as JSON integers, f32/f64 as JSON floats, bool, string (valid UTF-8),
  // an array as a JSON array of its elements (nested arrays allowed, depth-limited).
  nlohmann::json value;
};

struct GgufTensor {
  std::string name;
  std::vector<uint64_t> dims;  // ggml order: dims[0] is the fastest-varying (a row's length)
  uint32_t type = 0;           // GgmlType id; ggml_type_info(type) is non-null
  uint64_t offset = 0;         // in the data area
  uint64_t numel = 0, nbytes = 0;
  const uint8_t* data = nullptr;  // into the mapping (or the caller's buffer for parse())
};

class GgufFile {
 public:
  // Maps `path` and validates it (see the file comment). Error "<path>: ..." naming the key or
  // tensor, expected versus found.
  static std::shared_ptr<GgufFile> open(const std::string& path);
  // The same validation of a whole file held in memory; the views point into `file`.
  static std::shared_ptr<GgufFile> parse(const uint8_t* file, size_t size, const std::string& path_for_errors);

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // where the data area starts in the file
  const std::vector<GgufKv>& metadata() const { return kvs_; }  // in file order
  const std::vector<GgufTensor>& tensors() const { return tensors_; }  // in file order

  const GgufKv* find(const std::string& key) const;                  // nullptr if absent
  const GgufTensor* find_tensor(const std::string& name) const;      // nullptr if absent

  // Typed getters: Error "<path>: metadata key '<key>': ..." when absent or of another type.
  // get_uint accepts any integer type holding a non-negative value; get_float f32 or f64.
  uint64_t get_uint(const std::string& key) const;
  double get_float(const std::string& key) const;
  bool get_bool(const std::string& key) const;
  std::string get_string(const std::string& key) const;
  // An array whose elements have type `elem`; the JSON array.
  const nlohmann::json& get_array(const std::string& key, GgufType elem) const;

  ~GgufFile();

 private:
  GgufFile() = default;
  const GgufKv& need(const std::string& key) const;
  std::string path_;
  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32, data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string, size_t> kv_index_, tensor_index_;
};

}  // namespace fp4lm::io
