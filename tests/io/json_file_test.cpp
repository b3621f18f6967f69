#include "io/json_file.h"

#include <gtest/gtest.h>

#include "common/paths.h"
#include "core/error.h"

namespace fp4lm::io {
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

TEST(JsonFile, TypeNames) {
  EXPECT_EQ(json_type_name(nlohmann::json::array()), "array");
  EXPECT_EQ(json_type_name(nlohmann::json(-3)), "integer");
  EXPECT_EQ(json_type_name(nlohmann::json(3u)), "integer");
  EXPECT_EQ(json_type_name(nlohmann::json(2.5)), "number");
  EXPECT_EQ(json_type_name(nlohmann::json("s")), "string");
}

}  // namespace
}  // namespace fp4lm::io
