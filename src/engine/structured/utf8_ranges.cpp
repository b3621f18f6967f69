#include "engine/structured/utf8_ranges.h"

#include <algorithm>

namespace fp4lm::engine::structured {

namespace {

int encode(char32_t cp, uint8_t* b) {
  if (cp < 0x80) {
    b[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    b[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    b[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    b[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    b[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  b[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  b[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  b[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  b[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// lo..hi share one encoded length here.
void split_same_length(char32_t lo, char32_t hi, int n, std::vector<ByteRangeSeq>& out) {
  // Split until every continuation byte position ranges over a full or aligned block.
  for (int i = 1; i < n; ++i) {
    const char32_t m = (char32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        split_same_length(lo, lo | m, n, out);
        split_same_length((lo | m) + 1, hi, n, out);
        return;
      }
      if ((hi & m) != m) {
        split_same_length(lo, (hi & ~m) - 1, n, out);
        split_same_length(hi & ~m, hi, n, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  encode(lo, a);
  encode(hi, b);
  ByteRangeSeq s;
  for (int i = 0; i < n; ++i) s.emplace_back(a[i], b[i]);
  out.push_back(std::move(s));
}

}  // namespace

std::vector<ByteRangeSeq> utf8_sequences(char32_t lo, char32_t hi) {
  std::vector<ByteRangeSeq> out;
  static constexpr std::array<std::pair<char32_t, char32_t>, 5> kBands = {
      {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}}};
  static constexpr std::array<int, 5> kLen = {1, 2, 3, 3, 4};
  for (size_t k = 0; k < kBands.size(); ++k) {
    const char32_t a = std::max(lo, kBands[k].first), b = std::min(hi, kBands[k].second);
    if (a <= b) split_same_length(a, b, kLen[k], out);
  }
  return out;
}

std::vector<std::pair<char32_t, char32_t>> normalize_ranges(std::vector<std::pair<char32_t, char32_t>> r) {
  for (auto& [a, b] : r) {
    if (a > b) std::swap(a, b);
    b = std::min<char32_t>(b, 0x10FFFF);
  }
  std::erase_if(r, [](const auto& x) { return x.first > 0x10FFFF; });
  std::sort(r.begin(), r.end());
  std::vector<std::pair<char32_t, char32_t>> out;
  for (const auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  return out;
}

std::vector<std::pair<char32_t, char32_t>> complement_ranges(const std::vector<std::pair<char32_t, char32_t>>& r) {
  std::vector<std::pair<char32_t, char32_t>> out;
  char32_t next = 0;
  for (const auto& [a, b] : r) {
    if (a > next) out.emplace_back(next, a - 1);
    next = b + 1;
  }
  if (next <= 0x10FFFF) out.emplace_back(next, 0x10FFFF);
  return out;
}

void append_utf8(char32_t cp, std::string& out) {
  uint8_t b[4];
  const int n = encode(cp, b);
  out.append(reinterpret_cast<const char*>(b), static_cast<size_t>(n));
}

}  // namespace fp4lm::engine::structured
