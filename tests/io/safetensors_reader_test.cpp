// SafetensorsFile: valid headers parse into the right views; every malformed file in the corpus
// below is rejected with an fp4lm::Error that names the file, the tensor and expected vs found.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "common/paths.h"
#include "core/error.h"
#include "io/raw_safetensors.h"
#include "io/safetensors.h"

namespace fp4lm::io::safetensors_reader_test {
namespace {

using test::raw_safetensors;
using test::TempDir;

// ---------------------------------------------------------------- valid files

TEST(SafetensorsReader, ParsesViewsInOffsetOrder) {
  TempDir d;
  // Declared in name order, stored b then a; a 4-byte gap between them is allowed.
  std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[12,20]},)"
      R"("b":{"dtype":"U8","shape":[2,4],"data_offsets":[0,8]},)"
      R"("__metadata__":{"format":"pt","k":"v"}})";
  std::string bytes = raw_safetensors(header, 20);
  size_t data_start = 8 + header.size();
  float a[2] = {1.5f, -2.0f};
  std::memcpy(&bytes[data_start + 12], a, 8);
  for (int i = 0; i < 8; ++i) bytes[data_start + i] = static_cast<char>(i + 1);
  auto p = test::write_raw(d, "m.safetensors", bytes);

  auto f = SafetensorsFile::open(p.string());
  EXPECT_EQ(f->path(), p.string());
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->tensors()[0].name, "b");
  EXPECT_EQ(f->tensors()[0].offset, 0u);
  EXPECT_EQ(f->tensors()[1].name, "a");
  EXPECT_EQ(f->tensors()[1].offset, 12u);
  const TensorView& va = f->get("a");
  EXPECT_EQ(va.dtype, DType::F32);
  EXPECT_EQ(va.shape, (Shape{2}));
  EXPECT_EQ(va.nbytes, 8u);
  float got[2];
  std::memcpy(got, va.data, 8);
  EXPECT_EQ(got[0], 1.5f);
  EXPECT_EQ(got[1], -2.0f);
  const TensorView* vb = f->find("b");
  ASSERT_NE(vb, nullptr);
  EXPECT_EQ(vb->shape, (Shape{2, 4}));
  EXPECT_EQ(vb->data[7], 8);
  EXPECT_EQ(f->find("c"), nullptr);
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->metadata().at("k"), "v");
}

TEST(SafetensorsReader, GetMissingTensorNamesFileAndTensor) {
  TempDir d;
  auto p = test::write_raw(d, "m.safetensors", raw_safetensors("{}"));
  auto f = SafetensorsFile::open(p.string());
  try {
    f->get("nope");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), p.string() + ": tensor 'nope' not found");
  }
}

TEST(SafetensorsReader, EveryDtypeHasItsSize) {
  const std::pair<const char*, size_t> dtypes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"U16", 2}, {"I16", 2},     {"F16", 2},     {"BF16", 2},
      {"U32", 4},  {"I32", 4}, {"F32", 4}, {"U64", 8}, {"I64", 8}, {"F64", 8}, {"F8_E4M3", 1},
      {"F8_E5M2", 1}};
  for (auto [name, size] : dtypes) {
    std::string header = std::string(R"({"t":{"dtype":")") + name +
                         R"(","shape":[3],"data_offsets":[0,)" + std::to_string(3 * size) + "]}}";
    std::string bytes = raw_safetensors(header, 3 * size);
    auto entries = SafetensorsFile::parse_header(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                 bytes.size(), "mem", nullptr);
    ASSERT_EQ(entries.size(), 1u) << name;
    EXPECT_EQ(dtype_name(entries[0].view.dtype), name);
    EXPECT_EQ(entries[0].view.nbytes, 3 * size) << name;
  }
}

TEST(SafetensorsReader, ScalarsEmptyTensorsAndPadding) {
  // A 0-d scalar has one element; zero-length tensors (even with a huge other dimension) take no
  // bytes and may sit anywhere, even inside another tensor's range; trailing spaces are padding.
  std::string header =
      R"({"s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
      R"("z":{"dtype":"BF16","shape":[0,4611686018427387904],"data_offsets":[2,2]},)"
      R"("e":{"dtype":"U8","shape":[0],"data_offsets":[4,4]}})";
  header.append(5, ' ');
  std::string bytes = raw_safetensors(header, 4);
  std::map<std::string, std::string> meta;
  auto entries = SafetensorsFile::parse_header(reinterpret_cast<const uint8_t*>(bytes.data()),
                                               bytes.size(), "mem", &meta);
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].name, "s");
  EXPECT_EQ(entries[0].view.numel(), 1);
  EXPECT_EQ(entries[1].name, "z");
  EXPECT_EQ(entries[1].view.nbytes, 0u);
  EXPECT_EQ(entries[1].view.numel(), 0);
  EXPECT_EQ(entries[2].name, "e");
  EXPECT_TRUE(meta.empty());
}

TEST(SafetensorsReader, EmptyHeaderObjectAndEmptyDataArea) {
  std::string bytes = raw_safetensors("{}      ");
  auto entries = SafetensorsFile::parse_header(reinterpret_cast<const uint8_t*>(bytes.data()),
                                               bytes.size(), "mem", nullptr);
  EXPECT_TRUE(entries.empty());
}

// ---------------------------------------------------------------- the bad-input corpus

struct BadCase {
  std::string name;
  std::string bytes;
  std::vector<std::string> expect;  // substrings of the message (besides the path prefix)
};

std::string one_tensor(const std::string& dtype, const std::string& shape,
                       const std::string& offsets) {
  return R"({"w":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets +
         "}}";
}

std::vector<BadCase> bad_cases() {
  std::string good = one_tensor(R"("F32")", "[2,2]", "[0,16]");
  std::string big_len_file = raw_safetensors("{}", 0, 200ll << 20);
  return {
      {"EmptyFile", "", {"file is 0 bytes", "8-byte header length"}},
      {"TruncatedLength", std::string("\x10\x00\x00", 3), {"file is 3 bytes"}},
      {"TruncatedData", raw_safetensors(good, 8),
       {"tensor 'w'", "data_offsets [0, 16]", "past the end of the data area (8 bytes)"}},
      {"HeaderLengthPastEnd", raw_safetensors("{}", 10, 1000),
       {"header length 1000 runs past the end", "only 12 bytes follow"}},
      {"HeaderLengthOver100MiB", big_len_file, {"header length 209715200", "100 MiB"}},
      {"HeaderNotJson", raw_safetensors(R"({"w": {"dtype": )"), {"header is not valid JSON"}},
      {"HeaderBinaryGarbage", raw_safetensors(std::string("\xff\xfe\x00{", 4)),
       {"header is not valid JSON"}},
      {"HeaderNotObject", raw_safetensors("[1, 2]"), {"must be a JSON object, found array"}},
      {"HeaderNestedTooDeep", raw_safetensors("{\"__metadata__\": " + std::string(5000, '[') + std::string(5000, ']') + "}"),
       {"safetensors header: invalid JSON: nested deeper than 128 levels"}},
      {"HeaderIsString", raw_safetensors(R"("hello")"), {"must be a JSON object, found string"}},
      {"EntryNotObject", raw_safetensors(R"({"w": 3})"),
       {"tensor 'w'", "expected an object with dtype, shape, data_offsets, found integer"}},
      {"DuplicateTensor",
       raw_safetensors(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                       2),
       {"key 'w' twice"}},
      {"MissingDtype", raw_safetensors(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", 1),
       {"tensor 'w'", "missing 'dtype'"}},
      {"UnknownDtype", raw_safetensors(one_tensor(R"("F4")", "[2]", "[0,1]"), 1),
       {"tensor 'w'", "unknown dtype \"F4\"", "expected one of BOOL", "F8_E5M2"}},
      {"DtypeNotString", raw_safetensors(one_tensor("4", "[2]", "[0,8]"), 8),
       {"tensor 'w'", "dtype must be a string, found 4"}},
      {"MissingShape", raw_safetensors(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", 1),
       {"tensor 'w'", "missing 'shape'"}},
      {"ShapeNotArray", raw_safetensors(one_tensor(R"("U8")", "4", "[0,4]"), 4),
       {"tensor 'w'", "shape must be an array of non-negative integers, found 4"}},
      {"NegativeShape", raw_safetensors(one_tensor(R"("F32")", "[-2,2]", "[0,16]"), 16),
       {"tensor 'w'", "shape[0] must be a non-negative integer, found -2"}},
      {"FractionalShape", raw_safetensors(one_tensor(R"("F32")", "[2,2.5]", "[0,20]"), 20),
       {"tensor 'w'", "shape[1] must be a non-negative integer, found 2.5"}},
      {"StringShape", raw_safetensors(one_tensor(R"("F32")", R"(["2"])", "[0,8]"), 8),
       {"tensor 'w'", "shape[0] must be a non-negative integer, found \"2\""}},
      {"ShapeDimOverInt64",
       raw_safetensors(one_tensor(R"("U8")", "[18446744073709551615]", "[0,1]"), 1),
       {"tensor 'w'", "shape[0] = 18446744073709551615 is too large"}},
      {"ShapeNumelOverflow",
       raw_safetensors(one_tensor(R"("F32")", "[4294967296,4294967296,16]", "[0,16]"), 16),
       {"tensor 'w'", "[4294967296, 4294967296, 16]", "too many elements"}},
      {"ShapeBytesOverflow",
       raw_safetensors(one_tensor(R"("F32")", "[4611686018427387904]", "[0,16]"), 16),
       {"tensor 'w'", "[4611686018427387904] (F32)", "too many elements"}},
      {"MissingOffsets", raw_safetensors(R"({"w":{"dtype":"U8","shape":[1]}})", 1),
       {"tensor 'w'", "missing 'data_offsets'"}},
      {"OffsetsWrongArity", raw_safetensors(one_tensor(R"("U8")", "[1]", "[0,1,2]"), 2),
       {"tensor 'w'", "data_offsets must be [begin, end]", "found [0,1,2]"}},
      {"OffsetsNegative", raw_safetensors(one_tensor(R"("U8")", "[1]", "[-1,0]"), 2),
       {"tensor 'w'", "data_offsets must be [begin, end]", "found [-1,0]"}},
      {"OffsetsReversed", raw_safetensors(one_tensor(R"("U8")", "[0]", "[4,2]"), 8),
       {"tensor 'w'", "data_offsets [4, 2] has begin after end"}},
      {"OffsetsPastEnd", raw_safetensors(one_tensor(R"("U8")", "[4]", "[100,104]"), 16),
       {"tensor 'w'", "data_offsets [100, 104] run past the end of the data area (16 bytes)"}},
      {"OffsetsHuge",
       raw_safetensors(one_tensor(R"("U8")", "[1]", "[18446744073709551614,18446744073709551615]"),
                       16),
       {"tensor 'w'", "run past the end of the data area"}},
      {"SizeShapeMismatch", raw_safetensors(one_tensor(R"("F32")", "[3]", "[0,8]"), 8),
       {"tensor 'w'", "span 8 bytes", "shape [3] of F32 needs 12 bytes"}},
      {"OverlappingTensors",
       raw_safetensors(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                       12),
       {"tensor 'b' (data_offsets [4, 12]) overlaps tensor 'a' (which ends at 8)"}},
      {"OverlapInsideLongTensor",
       raw_safetensors(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                       R"("b":{"dtype":"U8","shape":[2],"data_offsets":[2,4]},)"
                       R"("c":{"dtype":"U8","shape":[2],"data_offsets":[8,10]}})",
                       16),
       {"tensor 'b'", "overlaps tensor 'a'"}},
      {"SameRangeTwice",
       raw_safetensors(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                       4),
       {"tensor 'b'", "overlaps tensor 'a'"}},
      {"MetadataNotStrings",
       raw_safetensors(R"({"__metadata__":{"format":"pt","step":100}})"),
       {"__metadata__ key 'step' must be a string, found integer 100"}},
      {"MetadataNotObject", raw_safetensors(R"({"__metadata__":["pt"]})"),
       {"__metadata__ must be an object of strings, found array"}},
  };
}

class SafetensorsBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(SafetensorsBadInput, RejectedWithContext) {
  const BadCase& c = GetParam();
  TempDir d;
  auto p = test::write_raw(d, c.name + ".safetensors", c.bytes);
  std::string msg;
  try {
    SafetensorsFile::open(p.string());
  } catch (const Error& e) {
    msg = e.what();
  }
  ASSERT_FALSE(msg.empty()) << c.name << ": no error";
  EXPECT_EQ(msg.rfind(p.string() + ": ", 0), 0u) << msg;
  for (const auto& s : c.expect) EXPECT_NE(msg.find(s), std::string::npos) << "'" << s << "' not in: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Corpus, SafetensorsBadInput, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(SafetensorsReader, EveryTruncationOfAValidFileIsRejectedOrConsistent) {
  // Cutting a valid file at any byte gives an Error (never a crash, never a view past the end).
  std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("b":{"dtype":"U8","shape":[3],"data_offsets":[8,11]}})";
  std::string full = raw_safetensors(header, 11);
  for (size_t n = 0; n < full.size(); ++n) {
    EXPECT_THROW(SafetensorsFile::parse_header(reinterpret_cast<const uint8_t*>(full.data()), n,
                                               "cut", nullptr),
                 Error)
        << "cut at " << n;
  }
  EXPECT_EQ(SafetensorsFile::parse_header(reinterpret_cast<const uint8_t*>(full.data()),
                                          full.size(), "full", nullptr)
                .size(),
            2u);
}

TEST(SafetensorsReader, MissingFileNamesThePath) {
  TempDir d;
  std::string p = (d / "absent.safetensors").string();
  try {
    SafetensorsFile::open(p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind(p + ": cannot open", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace fp4lm::io::safetensors_reader_test
