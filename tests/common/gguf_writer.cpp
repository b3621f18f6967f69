#include "common/gguf_writer.h"

#include <cstring>
#include <fstream>
#include <stdexcept>

#include "core/dtype.h"

namespace fp4lm::test {
namespace {

template <class T>
void put(std::vector<uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}
void put_str(std::vector<uint8_t>& b, const std::string& s) {
  put<uint64_t>(b, s.size());
  b.insert(b.end(), s.begin(), s.end());
}

}  // namespace

uint16_t gguf_f16(float f) { return f32_to_f16(f); }

void GgufBuilder::raw_kv(const std::string& key, uint32_t type, std::vector<uint8_t> value) {
  kvs_.push_back({key, type, std::move(value)});
}
void GgufBuilder::u32(const std::string& k, uint32_t v) { std::vector<uint8_t> b; put(b, v); raw_kv(k, 4, b); }
void GgufBuilder::i32(const std::string& k, int32_t v) { std::vector<uint8_t> b; put(b, v); raw_kv(k, 5, b); }
void GgufBuilder::u64(const std::string& k, uint64_t v) { std::vector<uint8_t> b; put(b, v); raw_kv(k, 10, b); }
void GgufBuilder::f32(const std::string& k, float v) { std::vector<uint8_t> b; put(b, v); raw_kv(k, 6, b); }
void GgufBuilder::boolean(const std::string& k, bool v) { raw_kv(k, 7, {static_cast<uint8_t>(v)}); }
void GgufBuilder::str(const std::string& k, const std::string& v) { std::vector<uint8_t> b; put_str(b, v); raw_kv(k, 8, b); }
void GgufBuilder::str_array(const std::string& k, const std::vector<std::string>& v) {
  std::vector<uint8_t> b;
  put<uint32_t>(b, 8);
  put<uint64_t>(b, v.size());
  for (const auto& s : v) put_str(b, s);
  raw_kv(k, 9, b);
}
void GgufBuilder::i32_array(const std::string& k, const std::vector<int32_t>& v) {
  std::vector<uint8_t> b;
  put<uint32_t>(b, 5);
  put<uint64_t>(b, v.size());
  for (int32_t x : v) put(b, x);
  raw_kv(k, 9, b);
}

void GgufBuilder::tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, std::vector<uint8_t> data) {
  tensors_.push_back({name, std::move(dims), type, std::move(data)});
}

GgufBuilder GgufBuilder::without(const std::string& key) const {
  GgufBuilder g = *this;
  std::erase_if(g.kvs_, [&](const Kv& kv) { return kv.key == key; });
  return g;
}

std::vector<uint8_t> GgufBuilder::build() const {
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
  put<uint32_t>(b, version);
  put<uint64_t>(b, tensors_.size());
  put<uint64_t>(b, kvs_.size());
  for (const Kv& kv : kvs_) {
    put_str(b, kv.key);
    put<uint32_t>(b, kv.type);
    b.insert(b.end(), kv.value.begin(), kv.value.end());
  }
  uint64_t off = 0;
  for (const T& t : tensors_) {
    put_str(b, t.name);
    put<uint32_t>(b, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) put<uint64_t>(b, d);
    put<uint32_t>(b, t.type);
    put<uint64_t>(b, off);
    off += (t.data.size() + alignment - 1) / alignment * alignment;
  }
  b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
  for (const T& t : tensors_) {
    b.insert(b.end(), t.data.begin(), t.data.end());
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
  }
  return b;
}

size_t GgufBuilder::tensor_info_offset(const std::string& name) const {
  size_t pos = 4 + 4 + 8 + 8;
  for (const Kv& kv : kvs_) pos += 8 + kv.key.size() + 4 + kv.value.size();
  for (const T& t : tensors_) {
    if (t.name == name) return pos;
    pos += 8 + t.name.size() + 4 + 8 * t.dims.size() + 4 + 8;
  }
  throw std::runtime_error("no tensor " + name);
}

size_t GgufBuilder::data_area_offset() const {
  size_t pos = 4 + 4 + 8 + 8;
  for (const Kv& kv : kvs_) pos += 8 + kv.key.size() + 4 + kv.value.size();
  for (const T& t : tensors_) pos += 8 + t.name.size() + 4 + 8 * t.dims.size() + 4 + 8;
  return (pos + alignment - 1) / alignment * alignment;
}

void GgufBuilder::write(const std::filesystem::path& p) const {
  const std::vector<uint8_t> b = build();
  std::ofstream out(p, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  if (!out) throw std::runtime_error("cannot write " + p.string());
}

}  // namespace fp4lm::test
