#pragma once
// The bytes of a pipeline message: plain values and arrays appended in order, read back in the
// same order with bounds checks (both ends are the same build on the same architecture).
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.h"

namespace fp4lm::dist {

class WireWriter {
 public:
  template <typename T>
  WireWriter& put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    append(&v, sizeof v);
    return *this;
  }
  template <typename T>
  WireWriter& put_array(std::span<const T> a) {
    put<uint64_t>(a.size());
    append(a.data(), a.size_bytes());
    return *this;
  }
  WireWriter& put_string(const std::string& s) {
    return put_array(std::span<const char>(s.data(), s.size()));
  }
  const std::vector<uint8_t>& bytes() const { return b_; }

 private:
  void append(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
  }
  std::vector<uint8_t> b_;
};

class WireReader {
 public:
  explicit WireReader(std::span<const uint8_t> b) : b_(b) {}
  template <typename T>
  T get() {
    T v;
    std::memcpy(&v, take(sizeof v), sizeof v);
    return v;
  }
  template <typename T>
  std::vector<T> get_array() {
    const uint64_t n = get<uint64_t>();
    if (n > b_.size() / sizeof(T)) fail("pipeline message: an array of {} entries in {} bytes", n, b_.size());
    std::vector<T> out(n);
    if (n) std::memcpy(out.data(), take(n * sizeof(T)), n * sizeof(T));
    return out;
  }
  // Copies n values straight into `out` (a length-prefixed array of exactly n).
  template <typename T>
  void get_into(T* out, size_t n) {
    const uint64_t have = get<uint64_t>();
    if (have != n) fail("pipeline message: {} values where {} were expected", have, n);
    if (n) std::memcpy(out, take(n * sizeof(T)), n * sizeof(T));
  }
  std::string get_string() {
    const std::vector<char> c = get_array<char>();
    return std::string(c.begin(), c.end());
  }
  bool done() const { return pos_ == b_.size(); }

 private:
  const uint8_t* take(size_t n) {
    if (n > b_.size() - pos_) fail("pipeline message: truncated ({} bytes, {} more wanted at {})", b_.size(), n, pos_);
    const uint8_t* p = b_.data() + pos_;
    pos_ += n;
    return p;
  }
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

}  // namespace fp4lm::dist
