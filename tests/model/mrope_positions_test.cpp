// Qwen's 3-D rotary positions (model/layers/mrope_positions.h) and the interleaved frequency layout
// (Rope::set_mrope) against transformers 5.24's Qwen3.5 get_rope_index and
// recomposition_frequencies (goldens: scripts/make_mrope_goldens.py).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include "common/paths.h"
#include "core/error.h"
#include "model/layers/mrope_positions.h"
#include "model/layers/rope.h"

namespace fp4lm::model::mrope_positions_test {
namespace {

nlohmann::json goldens() {
  std::ifstream in(test::source_dir() / "tests/model/fixtures/mrope/get_rope_index.json");
  return nlohmann::json::parse(in);
}

TEST(MropePositions, EqualTransformersGetRopeIndex) {
  const auto g = goldens();
  ASSERT_EQ(g["transformers"], "5.24.0");
  int cases = 0;
  for (const auto& c : g["cases"]) {
    const auto types = c["token_types"].get<std::vector<int>>();
    const auto grids = c["grids"].get<std::vector<std::vector<int64_t>>>();
    const int64_t merge = c["merge_size"].get<int64_t>();
    std::vector<ImageRun> runs;
    for (size_t i = 0; i < types.size(); ++i)
      if (types[i] == 1 && (i == 0 || types[i - 1] == 0)) {
        const auto& gr = grids.at(runs.size());
        runs.push_back({static_cast<int64_t>(i), {gr[0], gr[1], gr[2]}});
      }
    ASSERT_EQ(runs.size(), grids.size());
    const int64_t n = static_cast<int64_t>(types.size());
    const MropePositions p = mrope_positions(n, runs, merge);
    const auto want = c["positions"].get<std::vector<std::vector<int64_t>>>();
    for (int64_t t = 0; t < n; ++t)
      for (int a = 0; a < 3; ++a)
        EXPECT_EQ(p.thw[static_cast<size_t>(3 * t + a)], want[static_cast<size_t>(a)][static_cast<size_t>(t)])
            << "case " << cases << " token " << t << " axis " << a;
    EXPECT_EQ(p.delta, c["delta"].get<int64_t>()) << "case " << cases;
    ++cases;
  }
  EXPECT_EQ(cases, 6);
}

TEST(MropePositions, StartOffsetsEveryPosition) {
  const std::vector<ImageRun> runs = {{2, {1, 4, 2}}};
  const MropePositions a = mrope_positions(6, runs, 2), b = mrope_positions(6, runs, 2, 10);
  for (size_t i = 0; i < a.thw.size(); ++i) EXPECT_EQ(b.thw[i], a.thw[i] + 10);
  EXPECT_EQ(a.delta, b.delta);
  // 2 text, the 2x1 image at (2, 2..3, 2), text resuming at 2 + max(2, 1) = 4.
  EXPECT_EQ(a.thw, (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2, 2, 3, 2, 4, 4, 4, 5, 5, 5}));
  EXPECT_EQ(a.delta, 0);
}

TEST(MropePositions, ImagesThatDoNotFitAreErrorsNamingTheImage) {
  const std::vector<ImageRun> past_end = {{1, {1, 4, 4}}};  // 4 tokens from 1 in a prompt of 4
  EXPECT_THROW(
      {
        try {
          mrope_positions(4, past_end, 2);
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("image 1"), std::string::npos) << e.what();
          throw;
        }
      },
      Error);
  const std::vector<ImageRun> overlap = {{0, {1, 2, 2}}, {0, {1, 2, 2}}};
  EXPECT_THROW(mrope_positions(4, overlap, 2), Error);
  EXPECT_THROW(image_run_tokens({1, 3, 4}, 2), Error);  // h not a multiple of the merge size
  EXPECT_EQ(image_run_tokens({1, 32, 32}, 2), 256);
}

TEST(MropeRope, PairsTakeTheAxesTransformersRecomposes) {
  const auto g = goldens();
  for (const auto& c : g["interleaved_axes"]) {
    const auto section = c["section"].get<std::vector<int64_t>>();
    const auto pairs = c["pairs"].get<int64_t>();
    const auto axis = c["axis"].get<std::vector<int>>();
    Rope r(2 * pairs, 10000.0, RopeScaling{});
    r.set_mrope(section, true);
    const int64_t thw[3] = {3, 17, 40};
    std::vector<float> cs(static_cast<size_t>(pairs)), sn(cs.size());
    r.cos_sin_3d(thw, cs.data(), sn.data());
    for (int64_t i = 0; i < pairs; ++i) {
      const float angle = static_cast<float>(thw[axis[static_cast<size_t>(i)]]) * r.inv_freq()[static_cast<size_t>(i)];
      EXPECT_EQ(cs[static_cast<size_t>(i)], static_cast<float>(std::cos(static_cast<double>(angle))))
          << "section " << c["section"].dump() << " pair " << i;
      EXPECT_EQ(sn[static_cast<size_t>(i)], static_cast<float>(std::sin(static_cast<double>(angle))));
    }
  }
}

TEST(MropeRope, EqualPositionsAreOneDimensionalRope) {
  Rope r(64, 10000.0, RopeScaling{});
  r.set_mrope({11, 11, 10}, true);
  std::vector<float> c1(32), s1(32), c3(32), s3(32);
  for (int64_t p : {0, 1, 7, 1000}) {
    const int64_t thw[3] = {p, p, p};
    r.cos_sin(p, c1.data(), s1.data());
    r.cos_sin_3d(thw, c3.data(), s3.data());
    EXPECT_EQ(c1, c3);
    EXPECT_EQ(s1, s3);
  }
}

TEST(MropeRope, ContiguousSectionsSplitInOrder) {  // Qwen2-VL's layout
  Rope r(16, 10000.0, RopeScaling{});
  r.set_mrope({4, 2, 2}, false);
  const int64_t thw[3] = {5, 9, 13};
  std::vector<float> c(8), s(8);
  r.cos_sin_3d(thw, c.data(), s.data());
  for (int64_t i = 0; i < 8; ++i) {
    const int64_t p = i < 4 ? 5 : i < 6 ? 9 : 13;
    const float angle = static_cast<float>(p) * r.inv_freq()[static_cast<size_t>(i)];
    EXPECT_EQ(c[static_cast<size_t>(i)], static_cast<float>(std::cos(static_cast<double>(angle)))) << i;
  }
}

}  // namespace
}  // namespace fp4lm::model::mrope_positions_test
