// SafetensorsWriter / SafetensorsStreamWriter: round trips through the reader, the on-disk layout
// (padding, alignment, contiguous offsets), atomicity (no temp files, aborted writes leave nothing)
// and the checks on what is added.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "common/paths.h"
#include "core/error.h"
#include "io/safetensors.h"

namespace fp4lm::io::safetensors_writer_test {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

std::vector<std::string> dir_entries(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<uint8_t> bytes_of(const TensorView& v) { return {v.data, v.data + v.nbytes}; }

TEST(SafetensorsWriter, RoundTripsEveryKindOfTensor) {
  TempDir d;
  std::vector<uint8_t> codes(3 * 5);  // odd byte count, placed first to test alignment
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>(i * 7);
  std::vector<float> w = {1.0f, -2.5f, 3.25f, 0.0f, 1e-30f, -1e30f};
  std::vector<uint16_t> bf = {0x3f80, 0xbf80, 0x7fc0};
  std::vector<uint8_t> scales = {0x38, 0x7e};
  std::vector<double> d64 = {3.141592653589793};
  float s2 = 0.125f;

  SafetensorsWriter wr;
  wr.add("codes", DType::U8, {3, 5}, codes);
  wr.add("w", DType::F32, {2, 3}, w);
  wr.add("bf", DType::BF16, {3}, bf);
  wr.add("scales", DType::F8_E4M3, {1, 2}, scales.data(), scales.size());
  wr.add("scalar", DType::F32, {}, &s2, sizeof s2);
  wr.add("empty", DType::F32, {0, 64}, nullptr, 0);
  wr.add("d", DType::F64, {1}, std::vector<uint8_t>(reinterpret_cast<uint8_t*>(d64.data()),
                                                  reinterpret_cast<uint8_t*>(d64.data()) + 8));
  wr.set_metadata({{"format", "pt"}, {"producer", "fp4lm-test"}});
  std::string path = (d / "out.safetensors").string();
  wr.write(path);

  auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f->tensors().size(), 7u);
  EXPECT_EQ(bytes_of(f->get("codes")), codes);
  EXPECT_EQ(f->get("codes").shape, (Shape{3, 5}));
  EXPECT_EQ(f->get("w").dtype, DType::F32);
  std::vector<float> w_back(6);
  std::memcpy(w_back.data(), f->get("w").data, 24);
  EXPECT_EQ(w_back, w);
  EXPECT_EQ(f->get("bf").dtype, DType::BF16);
  EXPECT_EQ(f->get("bf").nbytes, 6u);
  EXPECT_EQ(f->get("scales").dtype, DType::F8_E4M3);
  EXPECT_EQ(f->get("scales").data[1], 0x7e);
  EXPECT_EQ(f->get("scalar").shape, Shape{});
  EXPECT_EQ(*f->get("scalar").as<float>(), 0.125f);
  EXPECT_EQ(f->get("empty").nbytes, 0u);
  EXPECT_EQ(f->get("empty").shape, (Shape{0, 64}));
  EXPECT_EQ(*f->get("d").as<double>(), 3.141592653589793);
  EXPECT_EQ(f->metadata().size(), 2u);
  EXPECT_EQ(f->metadata().at("producer"), "fp4lm-test");

  // Every view naturally aligned (the mapping is page-aligned, so absolute addresses tell).
  for (const auto& e : f->tensors()) {
    if (e.view.nbytes) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(e.view.data) % dtype_size(e.view.dtype), 0u) << e.name;
    }
  }
}

TEST(SafetensorsWriter, LayoutIsPaddedContiguousAndLargestElementsFirst) {
  TempDir d;
  SafetensorsWriter wr;
  wr.add("a_u8", DType::U8, {3}, std::vector<uint8_t>{1, 2, 3});
  wr.add("b_f32", DType::F32, {1}, std::vector<float>{1.0f});
  wr.add("c_bf16", DType::BF16, {1}, std::vector<uint16_t>{0x3f80});
  wr.add("d_i64", DType::I64, {1}, std::vector<int64_t>{-1});
  std::string path = (d / "x.safetensors").string();
  wr.write(path);

  std::string raw = test::read_file(path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(raw[i]);
  EXPECT_EQ(n % 8, 0u);
  std::string header = raw.substr(8, n);
  // Padding is spaces after the JSON text.
  size_t last = header.find_last_not_of(' ');
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - last - 1, 8u);
  auto j = nlohmann::json::parse(header);
  EXPECT_EQ(j["d_i64"]["data_offsets"], nlohmann::json({0, 8}));
  EXPECT_EQ(j["b_f32"]["data_offsets"], nlohmann::json({8, 12}));
  EXPECT_EQ(j["c_bf16"]["data_offsets"], nlohmann::json({12, 14}));
  EXPECT_EQ(j["a_u8"]["data_offsets"], nlohmann::json({14, 17}));
  EXPECT_EQ(j["a_u8"]["dtype"], "U8");
  EXPECT_EQ(j["a_u8"]["shape"], nlohmann::json({3}));
  EXPECT_FALSE(j.contains("__metadata__"));  // none set, none written
  EXPECT_EQ(raw.size(), 8 + n + 17);
}

TEST(SafetensorsWriter, WriteIsAtomicAndReplacesTheTarget) {
  TempDir d;
  std::string path = (d / "m.safetensors").string();
  test::write_file(path, "old contents");
  SafetensorsWriter wr;
  wr.add("x", DType::F32, {2}, std::vector<float>{1, 2});
  wr.write(path);
  EXPECT_EQ(dir_entries(d.path()), std::vector<std::string>{"m.safetensors"});  // no temp left
  EXPECT_EQ(SafetensorsFile::open(path)->tensors().size(), 1u);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0044, 0044u) << "written file should be readable by others";
}

TEST(SafetensorsWriter, EmptyFileIsValid) {
  TempDir d;
  std::string path = (d / "e.safetensors").string();
  SafetensorsWriter().write(path);
  EXPECT_TRUE(SafetensorsFile::open(path)->tensors().empty());
  EXPECT_EQ(test::read_file(path).size(), 16u);  // length + "{}" padded to 8
}

TEST(SafetensorsWriter, MissingDirectoryIsAnErrorNamingThePath) {
  TempDir d;
  std::string path = (d / "no" / "such" / "m.safetensors").string();
  SafetensorsWriter wr;
  wr.add("x", DType::U8, {1}, std::vector<uint8_t>{1});
  std::string msg = error_of([&] { wr.write(path); });
  EXPECT_EQ(msg.rfind(path + ": cannot create a temporary file", 0), 0u) << msg;
  EXPECT_TRUE(dir_entries(d.path()).empty());
}

TEST(SafetensorsWriter, AddChecksSizeNamesAndReservedKey) {
  SafetensorsWriter wr;
  std::string msg = error_of([&] { wr.add("w", DType::F32, {2, 3}, std::vector<float>(5)); });
  EXPECT_NE(msg.find("tensor 'w': 20 bytes given, shape [2, 3] of F32 needs 24"),
            std::string::npos)
      << msg;
  wr.add("w", DType::F32, {2, 3}, std::vector<float>(6));
  msg = error_of([&] { wr.add("w", DType::F32, {1}, std::vector<float>(1)); });
  EXPECT_NE(msg.find("tensor 'w' added twice"), std::string::npos) << msg;
  msg = error_of([&] { wr.add("__metadata__", DType::U8, {1}, std::vector<uint8_t>(1)); });
  EXPECT_NE(msg.find("reserved"), std::string::npos) << msg;
  msg = error_of([&] { wr.add("", DType::U8, {1}, std::vector<uint8_t>(1)); });
  EXPECT_NE(msg.find("must not be empty"), std::string::npos) << msg;
  msg = error_of([&] { wr.add("neg", DType::U8, {-1}, nullptr, 0); });
  EXPECT_NE(msg.find("tensor 'neg': shape [-1] has a negative dimension"), std::string::npos)
      << msg;
  msg = error_of([&] { wr.add("huge", DType::F32, {int64_t{1} << 62}, nullptr, 0); });
  EXPECT_NE(msg.find("tensor 'huge'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("too many elements"), std::string::npos) << msg;
  msg = error_of([&] { wr.add("null", DType::U8, {4}, nullptr, 4); });
  EXPECT_NE(msg.find("tensor 'null': null data"), std::string::npos) << msg;
}

// ---------------------------------------------------------------- stream writer

SafetensorsStreamWriter::Layout small_layout() {
  return {{"first", DType::U8, {5}}, {"second", DType::F32, {2}}, {"third", DType::BF16, {0}}};
}

TEST(SafetensorsStreamWriter, WritesInDeclaredOrderAndReadsBack) {
  TempDir d;
  std::string path = (d / "s.safetensors").string();
  {
    SafetensorsStreamWriter w(path, small_layout(), {{"format", "pt"}});
    uint8_t a[5] = {9, 8, 7, 6, 5};
    float b[2] = {0.5f, 4.0f};
    w.write_tensor("first", a, 5);
    w.write_tensor("second", b, 8);
    w.write_tensor("third", nullptr, 0);
    EXPECT_FALSE(fs::exists(path));  // nothing visible before finish()
    w.finish();
  }
  EXPECT_EQ(dir_entries(d.path()), std::vector<std::string>{"s.safetensors"});
  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(bytes_of(f->get("first")), (std::vector<uint8_t>{9, 8, 7, 6, 5}));
  EXPECT_EQ(f->get("second").as<float>()[1], 4.0f);
  EXPECT_EQ(f->get("third").nbytes, 0u);
  EXPECT_EQ(f->metadata().at("format"), "pt");
}

TEST(SafetensorsStreamWriter, AbortLeavesNothingAndKeepsTheOldFile) {
  TempDir d;
  std::string path = (d / "s.safetensors").string();
  test::write_file(path, "previous");
  {
    SafetensorsStreamWriter w(path, small_layout());
    uint8_t a[5] = {};
    w.write_tensor("first", a, 5);
    EXPECT_EQ(dir_entries(d.path()).size(), 2u);  // the target and the temp file
  }  // destroyed without finish()
  EXPECT_EQ(dir_entries(d.path()), std::vector<std::string>{"s.safetensors"});
  EXPECT_EQ(test::read_file(path), "previous");
}

TEST(SafetensorsStreamWriter, MisuseIsReportedAndNothingIsLeft) {
  TempDir d;
  std::string path = (d / "s.safetensors").string();
  uint8_t buf[8] = {};
  {
    SafetensorsStreamWriter w(path, small_layout());
    std::string msg = error_of([&] { w.write_tensor("second", buf, 8); });
    EXPECT_NE(msg.find("tensor 'second' written out of order; expected 'first' (tensor 1 of 3)"),
              std::string::npos)
        << msg;
    msg = error_of([&] { w.write_tensor("first", buf, 4); });
    EXPECT_NE(msg.find("tensor 'first': 4 bytes given, the declared shape needs 5"),
              std::string::npos)
        << msg;
    w.write_tensor("first", buf, 5);
    msg = error_of([&] { w.finish(); });
    EXPECT_NE(msg.find("finish() with 1 of 3 tensors written; next expected 'second'"),
              std::string::npos)
        << msg;
  }
  EXPECT_TRUE(dir_entries(d.path()).empty());

  std::string msg = error_of([&] {
    SafetensorsStreamWriter w(path, {{"x", DType::U8, {1}}, {"x", DType::U8, {1}}});
  });
  EXPECT_NE(msg.find("tensor 'x' declared twice"), std::string::npos) << msg;
  EXPECT_TRUE(dir_entries(d.path()).empty());
}

}  // namespace
}  // namespace fp4lm::io::safetensors_writer_test
