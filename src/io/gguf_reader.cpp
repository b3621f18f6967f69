// GGUF reading and validation (io/gguf.h). Every read goes through a bounds-checked cursor; counts
// are checked against the bytes left before anything is reserved, so a hostile header can neither
// read outside the file nor make us allocate what the file could not hold.
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/gguf.h"

namespace fp4lm::io {

const GgmlTypeInfo* ggml_type_info(uint32_t type) {
  static const GgmlTypeInfo f32{"F32", 1, 4}, f16{"F16", 1, 2}, q4_0{"Q4_0", 32, 18}, q4_1{"Q4_1", 32, 20},
      q5_0{"Q5_0", 32, 22}, q5_1{"Q5_1", 32, 24}, q8_0{"Q8_0", 32, 34}, q8_1{"Q8_1", 32, 36},
      q2_k{"Q2_K", 256, 84}, q3_k{"Q3_K", 256, 110}, q4_k{"Q4_K", 256, 144}, q5_k{"Q5_K", 256, 176},
      q6_k{"Q6_K", 256, 210}, q8_k{"Q8_K", 256, 292}, iq4_nl{"IQ4_NL", 32, 18}, iq4_xs{"IQ4_XS", 256, 136},
      i8{"I8", 1, 1}, i16{"I16", 1, 2}, i32{"I32", 1, 4}, i64{"I64", 1, 8}, f64{"F64", 1, 8}, bf16{"BF16", 1, 2};
  switch (static_cast<GgmlType>(type)) {
    case GgmlType::F32: return &f32;
    case GgmlType::F16: return &f16;
    case GgmlType::Q4_0: return &q4_0;
    case GgmlType::Q4_1: return &q4_1;
    case GgmlType::Q5_0: return &q5_0;
    case GgmlType::Q5_1: return &q5_1;
    case GgmlType::Q8_0: return &q8_0;
    case GgmlType::Q8_1: return &q8_1;
    case GgmlType::Q2_K: return &q2_k;
    case GgmlType::Q3_K: return &q3_k;
    case GgmlType::Q4_K: return &q4_k;
    case GgmlType::Q5_K: return &q5_k;
    case GgmlType::Q6_K: return &q6_k;
    case GgmlType::Q8_K: return &q8_k;
    case GgmlType::IQ4_NL: return &iq4_nl;
    case GgmlType::IQ4_XS: return &iq4_xs;
    case GgmlType::I8: return &i8;
    case GgmlType::I16: return &i16;
    case GgmlType::I32: return &i32;
    case GgmlType::I64: return &i64;
    case GgmlType::F64: return &f64;
    case GgmlType::BF16: return &bf16;
  }
  return nullptr;
}

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "unknown";
}

namespace {

constexpr uint32_t kMaxDims = 4;        // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;       // arrays of arrays: deeper is refused (stack use)
constexpr uint64_t kMaxAlignment = 1u << 20;

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) { ++i; continue; }
    if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07;
    else return false;
    if (i + n >= s.size()) return false;  // the continuation bytes are i+1 .. i+n
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += n + 1;
  }
  return true;
}

// A bounds-checked little-endian reader over [data, data + size).
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size, const std::string& path) : p_(data), size_(size), path_(path) {}
  size_t pos() const { return pos_; }
  size_t left() const { return size_ - pos_; }

  void need(size_t n, const std::string& what) const {
    if (n > left())
      fail("{}: truncated: {} needs {} bytes at offset {}, the file has {} left", path_, what, n, pos_, left());
  }
  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const std::string& what) {
    const uint64_t n = read<uint64_t>(what + " (string length)");
    if (n > left())
      fail("{}: {}: string length {} at offset {} runs past the end of the file ({} bytes left)", path_, what, n,
           pos_ - 8, left());
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n));
    if (!valid_utf8(s)) fail("{}: {}: the string at offset {} is not valid UTF-8", path_, what, pos_);
    pos_ += static_cast<size_t>(n);
    return s;
  }

 private:
  const uint8_t* p_;
  size_t size_, pos_ = 0;
  const std::string& path_;
};

// The fewest bytes one value of type t takes (to bound an array's count before reading it).
size_t min_value_bytes(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: case GgufType::STRING: return 8;
    case GgufType::ARRAY: return 12;
  }
  return 1;
}

bool known_value_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

nlohmann::json read_value(Cursor& c, GgufType t, const std::string& what, const std::string& path, int depth,
                          GgufType* elem_out) {
  switch (t) {
    case GgufType::U8: return c.read<uint8_t>(what);
    case GgufType::I8: return c.read<int8_t>(what);
    case GgufType::U16: return c.read<uint16_t>(what);
    case GgufType::I16: return c.read<int16_t>(what);
    case GgufType::U32: return c.read<uint32_t>(what);
    case GgufType::I32: return c.read<int32_t>(what);
    case GgufType::U64: return c.read<uint64_t>(what);
    case GgufType::I64: return c.read<int64_t>(what);
    case GgufType::F32: return static_cast<double>(c.read<float>(what));
    case GgufType::F64: return c.read<double>(what);
    case GgufType::BOOL: {
      const auto b = c.read<uint8_t>(what);
      if (b > 1) fail("{}: {}: a bool must be 0 or 1, found {}", path, what, b);
      return b == 1;
    }
    case GgufType::STRING: return c.str(what);
    case GgufType::ARRAY: {
      if (depth >= kMaxArrayDepth) fail("{}: {}: arrays nested deeper than {}", path, what, kMaxArrayDepth);
      const uint32_t et = c.read<uint32_t>(what + " (array element type)");
      if (!known_value_type(et)) fail("{}: {}: unknown array element type {}", path, what, et);
      const uint64_t n = c.read<uint64_t>(what + " (array length)");
      const auto elem = static_cast<GgufType>(et);
      if (n > c.left() / min_value_bytes(elem))
        fail("{}: {}: array of {} {} elements cannot fit in the {} bytes left", path, what, n, gguf_type_name(elem),
             c.left());
      if (elem_out) *elem_out = elem;
      nlohmann::json a = nlohmann::json::array();
      a.get_ref<nlohmann::json::array_t&>().reserve(static_cast<size_t>(n));
      for (uint64_t i = 0; i < n; ++i)
        a.push_back(read_value(c, elem, fmt::format("{}[{}]", what, i), path, depth + 1, nullptr));
      return a;
    }
  }
  fail("{}: {}: unknown value type {}", path, what, static_cast<uint32_t>(t));
}

}  // namespace

GgufFile::~GgufFile() = default;

std::shared_ptr<GgufFile> GgufFile::open(const std::string& path) {
  auto mapped = std::make_unique<MappedFile>(path);
  auto f = parse(mapped->data(), mapped->size(), path);
  f->file_ = std::move(mapped);
  return f;
}

std::shared_ptr<GgufFile> GgufFile::parse(const uint8_t* file, size_t size, const std::string& path) {
  std::shared_ptr<GgufFile> f(new GgufFile());
  f->path_ = path;
  Cursor c(file, size, f->path_);
  c.need(4, "the magic");
  if (std::memcmp(file, "GGUF", 4) != 0) {
    std::string found;
    for (int i = 0; i < 4; ++i)
      found += file[i] >= 0x20 && file[i] < 0x7f ? std::string(1, static_cast<char>(file[i]))
                                                  : fmt::format("\\x{:02x}", file[i]);
    fail("{}: not a GGUF file: expected the magic \"GGUF\", found \"{}\"", path, found);
  }
  c.read<uint32_t>("the magic");
  f->version_ = c.read<uint32_t>("the version");
  if (f->version_ != 2 && f->version_ != 3) {
    if (f->version_ == 1) fail("{}: GGUF version 1 (32-bit counts) is not supported; expected version 2 or 3", path);
    const uint32_t swapped = __builtin_bswap32(f->version_);  // std::byteswap is C++23
    if (swapped == 2 || swapped == 3)
      fail("{}: a big-endian GGUF file (version {} byte-swapped); only little-endian files are supported", path,
           swapped);
    fail("{}: unsupported GGUF version {}; expected 2 or 3", path, f->version_);
  }
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the metadata count");
  // Each metadata pair takes at least 8 (key length) + 4 (type) + 1 bytes; each tensor info at
  // least 8 (name length) + 4 (n_dims) + 8 (one dim) + 4 (type) + 8 (offset).
  if (n_kv > c.left() / 13)
    fail("{}: metadata count {} cannot fit in the {} bytes after the header", path, n_kv, c.left());
  if (n_tensors > c.left() / 32)
    fail("{}: tensor count {} cannot fit in the {} bytes after the header", path, n_tensors, c.left());

  f->kvs_.reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    GgufKv kv;
    kv.key = c.str(fmt::format("metadata pair {} (key)", i));
    if (kv.key.empty()) fail("{}: metadata pair {}: empty key", path, i);
    const std::string what = fmt::format("metadata key '{}'", kv.key);
    const uint32_t t = c.read<uint32_t>(what + " (value type)");
    if (!known_value_type(t)) fail("{}: {}: unknown value type {}", path, what, t);
    kv.type = static_cast<GgufType>(t);
    kv.value = read_value(c, kv.type, what, path, 0, &kv.elem_type);
    if (!f->kv_index_.emplace(kv.key, f->kvs_.size()).second) fail("{}: metadata key '{}' appears twice", path, kv.key);
    f->kvs_.push_back(std::move(kv));
  }
  if (const GgufKv* a = f->find("general.alignment")) {
    if (a->type != GgufType::U32)
      fail("{}: metadata key 'general.alignment': expected a u32, found {}", path, gguf_type_name(a->type));
    const uint64_t al = a->value.get<uint64_t>();
    if (al == 0 || !std::has_single_bit(al) || al > kMaxAlignment)
      fail("{}: metadata key 'general.alignment': expected a power of two from 1 to {}, found {}", path, kMaxAlignment, al);
    f->alignment_ = al;
  }

  f->tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensor t;
    t.name = c.str(fmt::format("tensor info {} (name)", i));
    if (t.name.empty()) fail("{}: tensor info {}: empty name", path, i);
    const std::string what = fmt::format("tensor '{}'", t.name);
    const uint32_t nd = c.read<uint32_t>(what + " (n_dims)");
    if (nd == 0 || nd > kMaxDims) fail("{}: {}: n_dims must be 1 to {}, found {}", path, what, kMaxDims, nd);
    t.numel = 1;
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t n = c.read<uint64_t>(fmt::format("{} (dim {})", what, d));
      if (n == 0) fail("{}: {}: dim {} is 0", path, what, d);
      if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / t.numel)
        fail("{}: {}: the element count overflows", path, what);
      t.numel *= n;
      t.dims.push_back(n);
    }
    t.type = c.read<uint32_t>(what + " (type)");
    const GgmlTypeInfo* info = ggml_type_info(t.type);
    if (!info) fail("{}: {}: unknown or unsupported ggml type {}", path, what, t.type);
    if (t.dims[0] % info->block_elems != 0)
      fail("{}: {}: type {} stores blocks of {} elements, but its row length (dim 0) is {}", path, what, info->name,
           info->block_elems, t.dims[0]);
    t.nbytes = t.numel / info->block_elems * info->block_bytes;  // numel < 2^63, block_bytes / elems <= 8
    t.offset = c.read<uint64_t>(what + " (offset)");
    if (t.offset % f->alignment_ != 0)
      fail("{}: {}: offset {} is not a multiple of the alignment {}", path, what, t.offset, f->alignment_);
    if (!f->tensor_index_.emplace(t.name, f->tensors_.size()).second)
      fail("{}: tensor '{}' appears twice", path, t.name);
    f->tensors_.push_back(std::move(t));
  }

  // The data area starts at the next multiple of the alignment after the tensor infos.
  const uint64_t end_of_infos = c.pos();
  const uint64_t data = (end_of_infos + f->alignment_ - 1) / f->alignment_ * f->alignment_;
  if (!f->tensors_.empty() && data > size)
    fail("{}: the data area would start at offset {}, past the end of the file ({} bytes)", path, data, size);
  f->data_offset_ = std::min<uint64_t>(data, size);
  const uint64_t area = size - f->data_offset_;
  for (GgufTensor& t : f->tensors_) {
    if (t.offset > area || t.nbytes > area - t.offset)
      fail("{}: tensor '{}': its data [{}, {}) runs past the end of the data area ({} bytes; the file is {} bytes)",
           path, t.name, t.offset, t.offset + t.nbytes, area, size);
    t.data = file + f->data_offset_ + t.offset;
  }
  std::vector<const GgufTensor*> by_offset;
  for (const GgufTensor& t : f->tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i]->offset < by_offset[i - 1]->offset + by_offset[i - 1]->nbytes)
      fail("{}: tensors '{}' and '{}' overlap (offsets {} + {} bytes and {})", path, by_offset[i - 1]->name,
           by_offset[i]->name, by_offset[i - 1]->offset, by_offset[i - 1]->nbytes, by_offset[i]->offset);
  return f;
}

const GgufKv* GgufFile::find(const std::string& key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const GgufTensor* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufKv& GgufFile::need(const std::string& key) const {
  const GgufKv* kv = find(key);
  if (!kv) fail("{}: metadata key '{}' is missing", path_, key);
  return *kv;
}

uint64_t GgufFile::get_uint(const std::string& key) const {
  const GgufKv& kv = need(key);
  switch (kv.type) {
    case GgufType::U8: case GgufType::U16: case GgufType::U32: case GgufType::U64:
      return kv.value.get<uint64_t>();
    case GgufType::I8: case GgufType::I16: case GgufType::I32: case GgufType::I64: {
      const auto v = kv.value.get<int64_t>();
      if (v < 0) fail("{}: metadata key '{}': expected a non-negative integer, found {}", path_, key, v);
      return static_cast<uint64_t>(v);
    }
    default:
      fail("{}: metadata key '{}': expected an integer, found a {}", path_, key, gguf_type_name(kv.type));
  }
}

double GgufFile::get_float(const std::string& key) const {
  const GgufKv& kv = need(key);
  if (kv.type != GgufType::F32 && kv.type != GgufType::F64)
    fail("{}: metadata key '{}': expected an f32 or f64, found a {}", path_, key, gguf_type_name(kv.type));
  return kv.value.get<double>();
}

bool GgufFile::get_bool(const std::string& key) const {
  const GgufKv& kv = need(key);
  if (kv.type != GgufType::BOOL) fail("{}: metadata key '{}': expected a bool, found a {}", path_, key, gguf_type_name(kv.type));
  return kv.value.get<bool>();
}

std::string GgufFile::get_string(const std::string& key) const {
  const GgufKv& kv = need(key);
  if (kv.type != GgufType::STRING)
    fail("{}: metadata key '{}': expected a string, found a {}", path_, key, gguf_type_name(kv.type));
  return kv.value.get<std::string>();
}

const nlohmann::json& GgufFile::get_array(const std::string& key, GgufType elem) const {
  const GgufKv& kv = need(key);
  if (kv.type != GgufType::ARRAY)
    fail("{}: metadata key '{}': expected an array, found a {}", path_, key, gguf_type_name(kv.type));
  if (kv.elem_type != elem && !kv.value.empty())
    fail("{}: metadata key '{}': expected an array of {}, found an array of {}", path_, key, gguf_type_name(elem),
         gguf_type_name(kv.elem_type));
  return kv.value;
}

}  // namespace fp4lm::io
