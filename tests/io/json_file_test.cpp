#include "io/json_file.h"

#include <gtest/gtest.h>

#include "common/paths.h"
#include "core/error.h"

namespace fp4lm::io::json_file_test {
namespace {

using test::TempDir;

std::string error_of(const std::string& path) {
  try {
    read_json_file(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(JsonFile, ReadsAnObject) {
  TempDir d;
  test::write_file(d / "a.json", R"({"x": [1, 2], "y": "z"})");
  auto j = read_json_file((d / "a.json").string());
  EXPECT_EQ(j["x"][1], 2);
  EXPECT_EQ(j["y"], "z");
}

TEST(JsonFile, MissingFileNamesThePath) {
  TempDir d;
  std::string p = (d / "nope.json").string();
  std::string msg = error_of(p);
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST(JsonFile, SyntaxErrorNamesPathLineAndColumn) {
  TempDir d;
  std::string p = (d / "bad.json").string();
  test::write_file(p, "{\n  \"a\": 1,\n  \"b\": ]\n}\n");
  std::string msg = error_of(p);
  EXPECT_EQ(msg.rfind(p + ": invalid JSON", 0), 0u) << msg;
  EXPECT_NE(msg.find("line 3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("column"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("[json.exception"), std::string::npos) << msg;
}

// Nesting is bounded while parsing (nlohmann's parser is iterative, but dump, copy and our own
// converters recurse): a few kilobytes of brackets must be an error naming the file, not a
// stack overflow later.
TEST(JsonFile, DeepNestingIsRefusedWhileParsing) {
  TempDir d;
  const std::string p = (d / "deep.json").string();
  for (const std::string& text : {std::string(200000, '[') + std::string(200000, ']'),
                                  "{\"a\": " + std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']') + "}"}) {
    test::write_file(p, text);
    EXPECT_EQ(error_of(p), p + ": invalid JSON: nested deeper than 128 levels");
  }
  // Exactly the limit is fine, in both DOM flavours.
  const std::string ok = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  EXPECT_TRUE(parse_json(ok, "x").is_array());
  EXPECT_TRUE(parse_ordered_json(ok, "x").is_array());
  EXPECT_THROW(parse_ordered_json("[" + ok + "]", "x"), Error);
  try {
    std::string objects;
    for (int i = 0; i < 300; ++i) objects += "{\"a\": ";
    parse_json(objects, "where:3");
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "where:3: invalid JSON: nested deeper than 128 levels");
  }
}

TEST(JsonFile, ADirectoryIsAClearError) {
  TempDir d;
  EXPECT_EQ(error_of(d.path().string()), d.path().string() + ": cannot open: is a directory, expected a file");
}

TEST(JsonFile, TypeNames) {
  EXPECT_EQ(json_type_name(nlohmann::json::array()), "array");
  EXPECT_EQ(json_type_name(nlohmann::json(-3)), "integer");
  EXPECT_EQ(json_type_name(nlohmann::json(3u)), "integer");
  EXPECT_EQ(json_type_name(nlohmann::json(2.5)), "number");
  EXPECT_EQ(json_type_name(nlohmann::json("s")), "string");
}

}  // namespace
}  // namespace fp4lm::io::json_file_test
