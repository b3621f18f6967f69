#pragma once
// A small GGUF writer for tests (the engine only reads GGUF): metadata of every value type,
// tensors as raw bytes in ggml's dims order (fastest first), offsets and alignment computed as
// llama.cpp lays them out. Tests corrupt its output to make hostile files.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fp4lm::test {

class GgufBuilder {
 public:
  uint32_t version = 3;
  uint64_t alignment = 32;  // the layout's; a test that changes it also writes general.alignment

  void u32(const std::string& key, uint32_t v);
  void i32(const std::string& key, int32_t v);
  void u64(const std::string& key, uint64_t v);
  void f32(const std::string& key, float v);
  void boolean(const std::string& key, bool v);
  void str(const std::string& key, const std::string& v);
  void str_array(const std::string& key, const std::vector<std::string>& v);
  void i32_array(const std::string& key, const std::vector<int32_t>& v);
  // Any value: type id and its encoded bytes as they follow the type.
  void raw_kv(const std::string& key, uint32_t type, std::vector<uint8_t> value);

  // dims in ggml order (dims[0] = row length); `data` the tensor's bytes.
  void tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, std::vector<uint8_t> data);

  // A copy without metadata key `key`.
  GgufBuilder without(const std::string& key) const;

  std::vector<uint8_t> build() const;
  void write(const std::filesystem::path& p) const;

  // Byte offset in build()'s output of the named tensor's info record (its name length field)
  // and of the data area; for tests that corrupt a file.
  size_t tensor_info_offset(const std::string& name) const;
  size_t data_area_offset() const;

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    std::vector<uint8_t> value;
  };
  struct T {
    std::string name;
    std::vector<uint64_t> dims;
    uint32_t type;
    std::vector<uint8_t> data;
  };
  std::vector<Kv> kvs_;
  std::vector<T> tensors_;
};

// Encoders for the quantized blocks of a GGUF (what llama.cpp writes), for building test files.
// f16 bits of a float (round to nearest).
uint16_t gguf_f16(float f);

}  // namespace fp4lm::test
