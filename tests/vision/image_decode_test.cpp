#include "vision/image_decode.h"

#include <gtest/gtest.h>

#include <cstring>

#include "common/error_of.h"
#include "common/png_header.h"
#include "vision/exif_orientation.h"
#include "vision/golden_data.h"

namespace fp4lm::vision::image_decode_test {
namespace {

using test::error_of;

bool lossy(const std::string& file) {
  return file.ends_with(".jpg") || file.find("lossy") != std::string::npos;
}

// Every input against the RGB that Pillow + transformers' convert_to_rgb give: lossless formats
// byte for byte; JPEG and lossy WebP within one level (decoders may differ in their last bit).
TEST(ImageDecode, MatchesPillowAndTransformersOnEveryGoldenInput) {
  const auto m = golden_data::manifest();
  ASSERT_GE(m["decode"].size(), 20u);
  for (const auto& d : m["decode"]) {
    const std::string file = d["file"];
    SCOPED_TRACE(file + " (Pillow mode " + d["mode"].get<std::string>() + ")");
    const auto bytes = golden_data::bytes(file);
    const RgbImage img = decode_image(bytes, ImageLimits{}, file);
    ASSERT_EQ(img.width, d["width"].get<int>());
    ASSERT_EQ(img.height, d["height"].get<int>());
    const auto want = golden_data::bytes(file + ".rgb");
    ASSERT_EQ(img.rgb.size(), want.size());
    int worst = 0;
    size_t differing = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const int diff = std::abs(int{img.rgb[i]} - int{want[i]});
      worst = std::max(worst, diff);
      differing += diff != 0;
    }
    if (lossy(file)) {
      EXPECT_LE(worst, 1) << differing << " of " << want.size() << " values differ";
    } else {
      EXPECT_EQ(worst, 0) << differing << " of " << want.size() << " values differ";
    }
  }
}

std::vector<uint8_t> golden(const std::string& name) { return golden_data::bytes(name); }

TEST(ImageDecode, NonImageIsRefusedWithWhatWasFound) {
  const std::string text = "hello, this is not an image";
  const std::vector<uint8_t> b(text.begin(), text.end());
  const auto e = error_of([&] { decode_image(b, {}, "image 1"); });
  EXPECT_NE(e.find("image 1: not an image"), std::string::npos) << e;
  EXPECT_NE(e.find("expected JPEG, PNG or WebP"), std::string::npos) << e;
  EXPECT_NE(e.find("68 65 6c 6c"), std::string::npos) << e;
  EXPECT_NE(error_of([&] { decode_image({}, {}, "empty"); }).find("empty: not an image"), std::string::npos);
}

TEST(ImageDecode, TruncatedFilesAreErrorsNamingTheFormat) {
  for (const char* file : {"rgb_56x84.png", "rgb_33x47.jpg", "progressive_36x48.jpg", "lossless_31x27.webp",
                           "lossy_40x28.webp", "palette_45x23.png"}) {
    SCOPED_TRACE(file);
    const auto full = golden(file);
    for (size_t keep : {full.size() / 2, full.size() - 20, size_t{40}, size_t{12}}) {
      const std::vector<uint8_t> cut(full.begin(), full.begin() + keep);
      const auto e = error_of([&] { decode_image(cut, {}, "cut"); });
      EXPECT_NE(e.find("cut: "), std::string::npos) << keep << " bytes: " << e;
      EXPECT_TRUE(e.find("corrupt or truncated") != std::string::npos || e.find("not an image") != std::string::npos)
          << keep << " bytes: " << e;
    }
  }
}

// Pillow decodes a JPEG with stray bytes before a marker (libjpeg warns); so does fp4lm, to the
// same pixels.
TEST(ImageDecode, JpegWithExtraneousBytesDecodesAsPillow) {
  const auto b = golden("rgb_33x47.jpg");
  ASSERT_EQ(b[b.size() - 2], 0xFF);
  std::vector<uint8_t> c(b.begin(), b.end() - 2);
  c.insert(c.end(), {0x12, 0x34, 0xFF, 0xD9});
  EXPECT_EQ(decode_image(c, {}, "x").rgb, decode_image(b, {}, "x").rgb);
}

// Pillow reads a PNG up to its image data and stops quietly at a missing IEND.
TEST(ImageDecode, PngWithoutIendDecodesAsPillow) {
  const auto b = golden("rgba_37x29.png");
  const std::vector<uint8_t> c(b.begin(), b.end() - 12);
  EXPECT_EQ(decode_image(c, {}, "x").rgb, golden("rgba_37x29.png.rgb"));
}

TEST(ImageDecode, CorruptBytesAreErrorsNotCrashes) {
  for (const char* file : {"rgb_56x84.png", "rgb_33x47.jpg", "lossless_31x27.webp"}) {
    auto b = golden(file);
    for (size_t i = b.size() / 3; i < b.size() * 2 / 3; i += 7) b[i] ^= 0x5a;
    try {
      const RgbImage img = decode_image(b, {}, file);  // JPEG may decode garbage pixels; that is allowed
      EXPECT_EQ(img.rgb.size(), size_t(img.width) * img.height * 3);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos);
    }
  }
}

// A PNG whose header claims 20000 x 20000 pixels (1.2 GB of RGB): refused from the header.
TEST(ImageDecode, DecompressionBombIsRefusedBeforeDecoding) {
  auto b = golden("rgb_56x84.png");
  test::set_png_size(b, 20000, 20000);
  const auto e = error_of([&] { decode_image(b, {}, "bomb.png"); });
  EXPECT_NE(e.find("bomb.png: PNG image of 20000x20000 pixels is larger than the limit"), std::string::npos) << e;

  // The same for a JPEG: the SOF0 frame header's height and width.
  auto j = golden("rgb_33x47.jpg");
  size_t sof = 2;
  while (sof + 9 < j.size() && !(j[sof] == 0xFF && j[sof + 1] == 0xC0)) ++sof;
  ASSERT_LT(sof + 9, j.size());
  j[sof + 5] = 0xEA, j[sof + 6] = 0x60, j[sof + 7] = 0xEA, j[sof + 8] = 0x60;  // 60000 x 60000
  const auto ej = error_of([&] { decode_image(j, {}, "bomb.jpg"); });
  EXPECT_NE(ej.find("bomb.jpg: JPEG image of 60000x60000 pixels is larger than the limit"), std::string::npos) << ej;
}

TEST(ImageDecode, LimitsAreTheCallers) {
  const auto b = golden("rgb_56x84.png");
  ImageLimits small;
  small.max_pixels = 56 * 84 - 1;
  EXPECT_NE(error_of([&] { decode_image(b, small, "x"); }).find("84x56 pixels is larger than the limit (4703 pixels"),
            std::string::npos);
  ImageLimits few_bytes;
  few_bytes.max_bytes = 100;
  EXPECT_NE(error_of([&] { decode_image(b, few_bytes, "x"); }).find("more than the limit of 100"), std::string::npos);
  ImageLimits narrow;
  narrow.max_side = 60;
  EXPECT_NE(error_of([&] { decode_image(b, narrow, "x"); }).find("60 per side"), std::string::npos);
  ImageLimits few_scans;
  few_scans.max_jpeg_scans = 2;
  const auto e = error_of([&] { decode_image(golden("progressive_36x48.jpg"), few_scans, "p.jpg"); });
  EXPECT_NE(e.find("p.jpg: corrupt or truncated JPEG: more than 2 progressive scans"), std::string::npos) << "[" << e << "]";
}

TEST(ImageDecode, SniffsTheFormatFromMagicBytes) {
  EXPECT_EQ(sniff_image_format(golden("rgb_33x47.jpg")), ImageFormat::kJpeg);
  EXPECT_EQ(sniff_image_format(golden("grey_40x30.png")), ImageFormat::kPng);
  EXPECT_EQ(sniff_image_format(golden("lossy_40x28.webp")), ImageFormat::kWebp);
  const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a'};
  EXPECT_EQ(sniff_image_format(gif), ImageFormat::kUnknown);
}

// Pillow's ImageOps.exif_transpose for all 8 orientations on a 3x2 image with distinct pixels.
TEST(ExifOrientation, AppliesTheEightOrientationsAsPillow) {
  RgbImage img;
  img.width = 3;
  img.height = 2;
  for (int i = 0; i < 6; ++i) img.rgb.insert(img.rgb.end(), {uint8_t(i), 0, 0});
  // Pixel values (row-major) after each transpose, from Pillow's Image.transpose semantics:
  // input  0 1 2 / 3 4 5
  const std::vector<std::vector<int>> want = {
      {}, {},
      {2, 1, 0, 5, 4, 3},  // 2 FLIP_LEFT_RIGHT
      {5, 4, 3, 2, 1, 0},  // 3 ROTATE_180
      {3, 4, 5, 0, 1, 2},  // 4 FLIP_TOP_BOTTOM
      {0, 3, 1, 4, 2, 5},  // 5 TRANSPOSE (2 wide, 3 high)
      {3, 0, 4, 1, 5, 2},  // 6 ROTATE_270 (clockwise)
      {5, 2, 4, 1, 3, 0},  // 7 TRANSVERSE
      {2, 5, 1, 4, 0, 3},  // 8 ROTATE_90 (counter-clockwise)
  };
  for (int o = 2; o <= 8; ++o) {
    const RgbImage out = apply_exif_orientation(img, o);
    EXPECT_EQ(out.width, o >= 5 ? 2 : 3) << o;
    std::vector<int> got;
    for (size_t i = 0; i < 6; ++i) got.push_back(out.rgb[i * 3]);
    EXPECT_EQ(got, want[o]) << "orientation " << o;
  }
}

TEST(ExifOrientation, ReadsBothByteOrdersAndIgnoresGarbage) {
  const uint8_t le[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 0x01, 3, 0, 1, 0, 0, 0, 6, 0, 0, 0, 0, 0, 0, 0};
  const uint8_t be[] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 0x01, 0x12, 0, 3, 0, 0, 0, 1, 0, 8, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(exif_orientation(le), 6);
  EXPECT_EQ(exif_orientation(be), 8);
  uint8_t bad[sizeof le];
  std::memcpy(bad, le, sizeof le);
  bad[4] = 200;  // IFD offset past the end
  EXPECT_EQ(exif_orientation(bad), 1);
  std::memcpy(bad, le, sizeof le);
  bad[18] = 9;  // out of range
  EXPECT_EQ(exif_orientation(bad), 1);
  EXPECT_EQ(exif_orientation(std::span<const uint8_t>(le, 10)), 1);
}

}  // namespace
}  // namespace fp4lm::vision::image_decode_test
