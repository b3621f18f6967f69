// Reading safetensors: header validation (parse_header) and the mmapped file (SafetensorsFile).
#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/mapped_file.h"
#include "io/json_file.h"
#include "io/safetensors.h"

namespace fp4lm::io {

namespace {

using nlohmann::json;

// A JSON value as a short string for "found ..." messages (long values are cut).
std::string show(const json& j) {
  std::string s = j.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Non-negative JSON integer -> uint64 (also accepts an integer written "-0").
bool as_count(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer() && j.get<int64_t>() == 0) {
    *out = 0;
    return true;
  }
  return false;
}

// Parses the header text, rejecting duplicate keys at any depth: nlohmann would silently keep the
// last one, and two entries under one tensor name are ambiguous.
json parse_header_json(const char* begin, const char* end, const std::string& path) {
  std::vector<std::vector<std::string>> keys_stack;  // keys seen per open object
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) -> bool {
    switch (ev) {
      case json::parse_event_t::object_start:
        check_json_depth(static_cast<size_t>(depth) + 1, path + ": safetensors header");
        keys_stack.emplace_back();
        break;
      case json::parse_event_t::array_start:
        check_json_depth(static_cast<size_t>(depth) + 1, path + ": safetensors header");
        break;
      case json::parse_event_t::object_end:
        if (!keys_stack.empty()) keys_stack.pop_back();
        break;
      case json::parse_event_t::key: {
        auto& keys = keys_stack.back();
        const auto& k = parsed.get_ref<const std::string&>();
        if (std::find(keys.begin(), keys.end(), k) != keys.end())
          fail("{}: safetensors header has the key '{}' twice (in one object); expected unique "
               "keys",
               path, k);
        keys.push_back(k);
        break;
      }
      default: break;
    }
    return true;
  };
  try {
    return json::parse(begin, end, cb);
  } catch (const json::exception& e) {
    std::string msg = e.what();
    if (auto p = msg.find("] "); msg.rfind("[json.exception", 0) == 0 && p != std::string::npos)
      msg = msg.substr(p + 2);
    fail("{}: safetensors header is not valid JSON: {}", path, msg);
  }
}

struct Range {
  uint64_t begin, end;
  size_t index;
};

}  // namespace

std::vector<TensorEntry> SafetensorsFile::parse_header(
    const uint8_t* file, size_t file_size, const std::string& path,
    std::map<std::string, std::string>* metadata) {
  if (file_size < 8)
    fail("{}: file is {} bytes; a safetensors file needs at least the 8-byte header length",
         path, file_size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | file[i];  // little-endian
  const uint64_t after_len = file_size - 8;
  if (header_len > kMaxSafetensorsHeaderBytes)
    fail("{}: safetensors header length {} exceeds the limit of {} bytes (100 MiB)", path,
         header_len, kMaxSafetensorsHeaderBytes);
  if (header_len > after_len)
    fail("{}: safetensors header length {} runs past the end of the file: only {} bytes follow "
         "the length field",
         path, header_len, after_len);

  const char* hbegin = reinterpret_cast<const char*>(file + 8);
  json header = parse_header_json(hbegin, hbegin + header_len, path);
  if (!header.is_object())
    fail("{}: safetensors header must be a JSON object, found {}", path, json_type_name(header));

  const uint8_t* data_area = file + 8 + header_len;
  const uint64_t data_size = after_len - header_len;

  std::vector<TensorEntry> entries;
  std::vector<Range> ranges;
  entries.reserve(header.size());
  for (auto& [name, info] : header.items()) {
    if (name == "__metadata__") {
      if (!info.is_object())
        fail("{}: __metadata__ must be an object of strings, found {}", path, json_type_name(info));
      for (auto& [k, v] : info.items()) {
        if (!v.is_string())
          fail("{}: __metadata__ key '{}' must be a string, found {} {}", path, k,
               json_type_name(v), show(v));
        if (metadata) (*metadata)[k] = v.get<std::string>();
      }
      continue;
    }
    if (!info.is_object())
      fail("{}: tensor '{}': expected an object with dtype, shape, data_offsets, found {}", path,
           name, json_type_name(info));

    // dtype
    auto dt_it = info.find("dtype");
    if (dt_it == info.end()) fail("{}: tensor '{}': missing 'dtype'", path, name);
    if (!dt_it->is_string())
      fail("{}: tensor '{}': dtype must be a string, found {}", path, name, show(*dt_it));
    auto dtype = parse_dtype(dt_it->get_ref<const std::string&>());
    if (!dtype)
      fail("{}: tensor '{}': unknown dtype {}; expected one of BOOL, U8, I8, U16, I16, F16, BF16, "
           "U32, I32, F32, U64, I64, F64, F8_E4M3, F8_E5M2",
           path, name, show(*dt_it));

    // shape: numel x size must fit in uint64 (and numel in int64, as Shape holds int64).
    auto sh_it = info.find("shape");
    if (sh_it == info.end()) fail("{}: tensor '{}': missing 'shape'", path, name);
    if (!sh_it->is_array())
      fail("{}: tensor '{}': shape must be an array of non-negative integers, found {}", path,
           name, show(*sh_it));
    Shape shape;
    uint64_t numel = 1;
    bool overflow = false;
    for (size_t d = 0; d < sh_it->size(); ++d) {
      const json& dim = (*sh_it)[d];
      uint64_t v = 0;
      if (!as_count(dim, &v))
        fail("{}: tensor '{}': shape[{}] must be a non-negative integer, found {}", path, name, d,
             show(dim));
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail("{}: tensor '{}': shape[{}] = {} is too large", path, name, d, v);
      shape.push_back(static_cast<int64_t>(v));
      overflow = overflow || __builtin_mul_overflow(numel, v, &numel);
    }
    uint64_t nbytes = 0;
    // A zero dimension makes the tensor empty however large the others are.
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) numel = 0, overflow = false;
    if (overflow || numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(*dtype)), &nbytes))
      fail("{}: tensor '{}': shape {} ({}) has too many elements to address", path, name,
           shape_str(shape), dtype_name(*dtype));

    // data_offsets
    auto off_it = info.find("data_offsets");
    if (off_it == info.end()) fail("{}: tensor '{}': missing 'data_offsets'", path, name);
    uint64_t begin = 0, end = 0;
    if (!off_it->is_array() || off_it->size() != 2 || !as_count((*off_it)[0], &begin) ||
        !as_count((*off_it)[1], &end))
      fail("{}: tensor '{}': data_offsets must be [begin, end] (non-negative integers), found {}",
           path, name, show(*off_it));
    if (begin > end)
      fail("{}: tensor '{}': data_offsets [{}, {}] has begin after end", path, name, begin, end);
    if (end > data_size)
      fail("{}: tensor '{}': data_offsets [{}, {}] run past the end of the data area ({} bytes)",
           path, name, begin, end, data_size);
    if (end - begin != nbytes)
      fail("{}: tensor '{}': data_offsets [{}, {}] span {} bytes, but shape {} of {} needs {} "
           "bytes",
           path, name, begin, end, end - begin, shape_str(shape), dtype_name(*dtype), nbytes);

    TensorEntry e;
    e.name = name;
    e.view.dtype = *dtype;
    e.view.shape = std::move(shape);
    e.view.data = data_area + begin;
    e.view.nbytes = static_cast<size_t>(nbytes);
    e.offset = static_cast<size_t>(begin);
    ranges.push_back({begin, end, entries.size()});
    entries.push_back(std::move(e));
  }

  // No byte may belong to two tensors: sorted by begin, each non-empty tensor must start at or
  // after the furthest end seen so far. Empty tensors occupy no bytes and never overlap.
  std::sort(ranges.begin(), ranges.end(), [&](const Range& a, const Range& b) {
    if (a.begin != b.begin) return a.begin < b.begin;
    if (a.end != b.end) return a.end < b.end;
    return entries[a.index].name < entries[b.index].name;
  });
  uint64_t max_end = 0;
  size_t max_owner = 0;
  for (const Range& r : ranges) {
    if (r.begin == r.end) continue;
    if (r.begin < max_end)
      fail("{}: tensor '{}' (data_offsets [{}, {}]) overlaps tensor '{}' (which ends at {}); "
           "expected disjoint byte ranges",
           path, entries[r.index].name, r.begin, r.end, entries[max_owner].name, max_end);
    max_end = r.end;
    max_owner = r.index;
  }

  std::vector<TensorEntry> sorted;
  sorted.reserve(entries.size());
  for (const Range& r : ranges) sorted.push_back(std::move(entries[r.index]));
  return sorted;
}

SafetensorsFile::~SafetensorsFile() = default;

std::shared_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->file_ = std::make_unique<MappedFile>(path);
  f->tensors_ = parse_header(f->file_->data(), f->file_->size(), path, &f->metadata_);
  f->index_.reserve(f->tensors_.size());
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_.emplace(f->tensors_[i].name, i);
  return f;
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second].view;
}

const TensorView& SafetensorsFile::get(const std::string& name) const {
  if (const TensorView* v = find(name)) return *v;
  fail("{}: tensor '{}' not found", path_, name);
}

}  // namespace fp4lm::io
