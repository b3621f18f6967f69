// The GGUF reader (io/gguf.h): a well-formed file read back exactly, and every kind of hostile
// file refused with an Error naming what is wrong (never a crash, a hang or an out-of-bounds read).
#include <gtest/gtest.h>

#include <cstring>

#include "common/error_of.h"
#include "common/gguf_writer.h"
#include "core/error.h"
#include "io/gguf.h"

namespace fp4lm::io::gguf_reader_test {
namespace {

using test::error_of;
using test::GgufBuilder;

std::vector<uint8_t> bytes_of(size_t n, uint8_t start) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(start + i);
  return b;
}

GgufBuilder sample() {
  GgufBuilder g;
  g.str("general.architecture", "llama");
  g.u32("llama.block_count", 2);
  g.f32("llama.rope.freq_base", 10000.5f);
  g.boolean("tokenizer.ggml.add_bos_token", true);
  g.str_array("tokenizer.ggml.tokens", {"a", "b", "\xc3\xa9"});
  g.i32_array("tokenizer.ggml.token_type", {1, 3, 1});
  g.tensor("norm", {5}, 0, bytes_of(20, 1));        // F32 [5]
  g.tensor("w", {32, 2}, 8, bytes_of(68, 100));     // Q8_0 [2, 32]: 2 blocks of 34 bytes
  return g;
}

std::string parse_error(const std::vector<uint8_t>& b) {
  return error_of([&] { GgufFile::parse(b.data(), b.size(), "x.gguf"); });
}

template <class T>
void poke(std::vector<uint8_t>& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

TEST(GgufReader, ReadsMetadataAndTensorsBack) {
  const GgufBuilder g = sample();
  const std::vector<uint8_t> b = g.build();
  auto f = GgufFile::parse(b.data(), b.size(), "x.gguf");
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  ASSERT_EQ(f->metadata().size(), 6u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_uint("llama.block_count"), 2u);
  EXPECT_EQ(f->get_float("llama.rope.freq_base"), 10000.5);
  EXPECT_TRUE(f->get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(f->get_array("tokenizer.ggml.tokens", GgufType::STRING), nlohmann::json({"a", "b", "\xc3\xa9"}));
  EXPECT_EQ(f->get_array("tokenizer.ggml.token_type", GgufType::I32), nlohmann::json({1, 3, 1}));
  ASSERT_EQ(f->tensors().size(), 2u);
  const GgufTensor* w = f->find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dims, (std::vector<uint64_t>{32, 2}));
  EXPECT_EQ(w->numel, 64u);
  EXPECT_EQ(w->nbytes, 68u);
  EXPECT_EQ(w->offset, 32u);  // after norm's 20 bytes, aligned to 32
  EXPECT_EQ(w->data, b.data() + g.data_area_offset() + 32);
  EXPECT_EQ(w->data[0], 100);
  EXPECT_EQ(f->find_tensor("norm")->data[19], 20);
  EXPECT_EQ(f->find_tensor("nope"), nullptr);
}

TEST(GgufReader, TypedGettersNameTheKeyAndTheTypes) {
  const std::vector<uint8_t> b = sample().build();
  auto f = GgufFile::parse(b.data(), b.size(), "x.gguf");
  EXPECT_EQ(error_of([&] { f->get_uint("missing.key"); }), "x.gguf: metadata key 'missing.key' is missing");
  EXPECT_EQ(error_of([&] { f->get_uint("general.architecture"); }),
            "x.gguf: metadata key 'general.architecture': expected an integer, found a string");
  EXPECT_EQ(error_of([&] { f->get_array("tokenizer.ggml.tokens", GgufType::I32); }),
            "x.gguf: metadata key 'tokenizer.ggml.tokens': expected an array of i32, found an array of string");
  EXPECT_EQ(error_of([&] { f->get_string("llama.block_count"); }),
            "x.gguf: metadata key 'llama.block_count': expected a string, found a u32");
}

TEST(GgufReader, EveryTruncationIsAnErrorNotACrash) {
  const std::vector<uint8_t> b = sample().build();
  const size_t data_end = sample().data_area_offset() + 32 + 68;
  for (size_t n = 0; n < data_end; ++n) {
    std::vector<uint8_t> cut(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(n));
    const std::string e = parse_error(cut);
    ASSERT_FALSE(e.empty()) << "a file cut to " << n << " bytes was accepted";
    ASSERT_EQ(e.rfind("x.gguf: ", 0), 0u) << e;
  }
  const auto in_w_info = static_cast<std::ptrdiff_t>(sample().tensor_info_offset("w") + 10);
  EXPECT_EQ(parse_error(std::vector<uint8_t>(b.begin(), b.begin() + in_w_info)),
            fmt::format("x.gguf: truncated: tensor 'w' (n_dims) needs 4 bytes at offset {}, the file has 1 left",
                        in_w_info - 1));
  EXPECT_EQ(parse_error(std::vector<uint8_t>(b.begin(), b.begin() + 30)),
            "x.gguf: metadata count 6 cannot fit in the 6 bytes after the header");
  EXPECT_NE(parse_error(std::vector<uint8_t>(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(data_end - 1)))
                .find("tensor 'w': its data [32, 100) runs past the end of the data area"),
            std::string::npos);
}

TEST(GgufReader, HeaderErrors) {
  std::vector<uint8_t> b = sample().build();
  auto bad = b;
  bad[0] = 'X';
  EXPECT_EQ(parse_error(bad), "x.gguf: not a GGUF file: expected the magic \"GGUF\", found \"XGUF\"");
  bad = b;
  poke<uint32_t>(bad, 4, 1);
  EXPECT_NE(parse_error(bad).find("GGUF version 1"), std::string::npos);
  poke<uint32_t>(bad, 4, 7);
  EXPECT_EQ(parse_error(bad), "x.gguf: unsupported GGUF version 7; expected 2 or 3");
  poke<uint32_t>(bad, 4, 0x03000000);
  EXPECT_NE(parse_error(bad).find("big-endian"), std::string::npos);
  bad = b;
  poke<uint64_t>(bad, 8, uint64_t{1} << 60);  // tensor count
  EXPECT_NE(parse_error(bad).find("tensor count 1152921504606846976 cannot fit"), std::string::npos);
  bad = b;
  poke<uint64_t>(bad, 16, 1'000'000);  // metadata count
  EXPECT_NE(parse_error(bad).find("metadata count 1000000 cannot fit"), std::string::npos);
}

TEST(GgufReader, MetadataErrors) {
  auto with = [](auto&& add) {
    GgufBuilder g;
    add(g);
    return parse_error(g.build());
  };
  EXPECT_EQ(with([](GgufBuilder& g) { g.u32("a", 1); g.u32("a", 2); }), "x.gguf: metadata key 'a' appears twice");
  EXPECT_EQ(with([](GgufBuilder& g) { g.raw_kv("a", 13, {0, 0, 0, 0}); }), "x.gguf: metadata key 'a': unknown value type 13");
  EXPECT_EQ(with([](GgufBuilder& g) { g.raw_kv("a", 7, {2}); }), "x.gguf: metadata key 'a': a bool must be 0 or 1, found 2");
  EXPECT_NE(with([](GgufBuilder& g) { g.str("a", "\xff\xfe"); }).find("metadata key 'a': the string at offset"),
            std::string::npos);
  // An array claiming more elements than the file could hold is refused before any allocation.
  EXPECT_NE(with([](GgufBuilder& g) {
              std::vector<uint8_t> v = {8, 0, 0, 0};
              for (int i = 0; i < 8; ++i) v.push_back(0xff);
              g.raw_kv("a", 9, v);
            }).find("metadata key 'a': array of 18446744073709551615 string elements cannot fit"),
            std::string::npos);
  // A string length past the end of the file.
  EXPECT_NE(with([](GgufBuilder& g) { g.raw_kv("a", 8, {0xff, 0xff, 0xff, 0, 0, 0, 0, 0}); })
                .find("metadata key 'a': string length 16777215"),
            std::string::npos);
  EXPECT_EQ(with([](GgufBuilder& g) { g.u64("general.alignment", 32); }),
            "x.gguf: metadata key 'general.alignment': expected a u32, found u64");
  EXPECT_EQ(with([](GgufBuilder& g) { g.u32("general.alignment", 24); }),
            "x.gguf: metadata key 'general.alignment': expected a power of two from 1 to 1048576, found 24");
}

TEST(GgufReader, AlignmentKeyIsHonoured) {
  GgufBuilder g;
  g.alignment = 64;
  g.u32("general.alignment", 64);
  g.tensor("a", {3}, 0, bytes_of(12, 0));
  g.tensor("b", {3}, 0, bytes_of(12, 50));
  const std::vector<uint8_t> b = g.build();
  auto f = GgufFile::parse(b.data(), b.size(), "x.gguf");
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  EXPECT_EQ(f->find_tensor("b")->offset, 64u);
  EXPECT_EQ(f->find_tensor("b")->data[0], 50);
}

TEST(GgufReader, TensorInfoErrors) {
  auto one = [](std::vector<uint64_t> dims, uint32_t type, size_t nbytes) {
    GgufBuilder g;
    g.tensor("t", std::move(dims), type, std::vector<uint8_t>(nbytes));
    return parse_error(g.build());
  };
  EXPECT_EQ(one({4}, 16, 8), "x.gguf: tensor 't': unknown or unsupported ggml type 16");
  EXPECT_EQ(one({4}, 99, 8), "x.gguf: tensor 't': unknown or unsupported ggml type 99");
  EXPECT_EQ(one({}, 0, 0), "x.gguf: tensor 't': n_dims must be 1 to 4, found 0");
  EXPECT_EQ(one({1, 1, 1, 1, 1}, 0, 4), "x.gguf: tensor 't': n_dims must be 1 to 4, found 5");
  EXPECT_EQ(one({4, 0}, 0, 0), "x.gguf: tensor 't': dim 1 is 0");
  EXPECT_EQ(one({1ull << 32, 1ull << 32}, 0, 0), "x.gguf: tensor 't': the element count overflows");
  EXPECT_EQ(one({16}, 2, 18),
            "x.gguf: tensor 't': type Q4_0 stores blocks of 32 elements, but its row length (dim 0) is 16");

  GgufBuilder g;
  g.tensor("a", {4}, 0, bytes_of(16, 0));
  g.tensor("b", {4}, 0, bytes_of(16, 0));
  g.tensor("a", {4}, 0, bytes_of(16, 0));
  EXPECT_EQ(parse_error(g.build()), "x.gguf: tensor 'a' appears twice");

  GgufBuilder h;
  h.tensor("a", {8}, 0, bytes_of(32, 0));
  h.tensor("b", {8}, 0, bytes_of(32, 0));
  std::vector<uint8_t> b = h.build();
  const size_t b_offset_field = h.tensor_info_offset("b") + 8 + 1 + 4 + 8 + 4;
  poke<uint64_t>(b, b_offset_field, 8);  // unaligned
  EXPECT_EQ(parse_error(b), "x.gguf: tensor 'b': offset 8 is not a multiple of the alignment 32");
  poke<uint64_t>(b, b_offset_field, 0);  // the same bytes as a
  EXPECT_EQ(parse_error(b), "x.gguf: tensors 'a' and 'b' overlap (offsets 0 + 32 bytes and 0)");
  poke<uint64_t>(b, b_offset_field, uint64_t{1} << 62);  // far past the end
  EXPECT_NE(parse_error(b).find("tensor 'b': its data [4611686018427387904"), std::string::npos);
  poke<uint64_t>(b, b_offset_field, ~uint64_t{0} - 31);  // offset + nbytes overflows
  EXPECT_NE(parse_error(b).find("tensor 'b': its data"), std::string::npos);
}

TEST(GgufReader, OpensAFileAndNamesIt) {
  EXPECT_NE(error_of([] { GgufFile::open("/nonexistent/m.gguf"); }).find("/nonexistent/m.gguf"), std::string::npos);
}

}  // namespace
}  // namespace fp4lm::io::gguf_reader_test
