// Fail fast when the weights cannot fit in RAM (issue 23 item 5): the bytes a run maps, counted
// from the headers (MTP layers and vision towers left out, a pipeline stage's share), and the
// load error with the figures, or the warning under FP4LM_ALLOW_PAGING=1.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/error_of.h"
#include "common/log_capture.h"
#include "common/paths.h"
#include "io/checkpoint.h"
#include "model/causal_lm.h"
#include "reference/gemma_reference.h"
#include "model/load/memory_fit.h"
#include "reference/tiny_models.h"

namespace fp4lm::model::memory_fit_test {
namespace {

using test::TempDir;

// Bytes of the stored tensors whose names contain any of `parts`.
size_t bytes_matching(const io::Checkpoint& ck, std::initializer_list<const char*> parts) {
  size_t b = 0;
  for (const std::string& n : ck.tensor_names())
    for (const char* p : parts)
      if (n.find(p) != std::string::npos) {
        b += ck.get(n).nbytes;
        break;
      }
  return b;
}

TEST(MemoryFit, TheMtpLayerIsNotCountedAndStagesAddUp) {
  TempDir dir;
  test::write_tiny_model(test::make_tiny_model("DeepseekV3ForCausalLM"), dir.path());  // 3 layers + MTP layer 3
  auto ck = io::Checkpoint::open(dir.path().string());
  const size_t mtp = bytes_matching(*ck, {"model.layers.3."});
  ASSERT_GT(mtp, 0u);
  const size_t all = stage_weight_bytes(*ck, "model.", 0, 3);
  EXPECT_EQ(all, ck->total_tensor_bytes() - mtp);
  // Pipeline stages: layers [0, 1) with the ends, [1, 3) without: the whole model, no byte twice.
  EXPECT_EQ(stage_weight_bytes(*ck, "model.", 0, 1) + stage_weight_bytes(*ck, "model.", 1, 3, false), all);
  EXPECT_EQ(stage_weight_bytes(*ck, "model.", 1, 3, false), bytes_matching(*ck, {"model.layers.1.", "model.layers.2."}));
}

TEST(MemoryFit, VisionTowersAreNotCounted) {
  TempDir dir;
  gemma_ref::write_gemma(gemma_ref::make_gemma3(), dir.path(), /*vl=*/true);
  auto ck = io::Checkpoint::open(dir.path().string());
  const size_t vision = bytes_matching(*ck, {"vision", "multi_modal"});
  ASSERT_GT(vision, 0u);
  EXPECT_EQ(stage_weight_bytes(*ck, "model.language_model.", 0, 4), ck->total_tensor_bytes() - vision);
}

TEST(MemoryFit, ALoadThatCannotFitFailsWithTheFiguresOrWarnsUnderAllowPaging) {
  TempDir dir;
  test::write_tiny_model(test::make_tiny_model("LlamaForCausalLM"), dir.path());
  EngineOptions o;
  o.dtype = "float32";
  LoadOptions lo;
  lo.ram_bytes = 4096;
  ::unsetenv("FP4LM_ALLOW_PAGING");
  const std::string e = test::error_of([&] { CausalLM::load(dir.path().string(), o, lo); });
  EXPECT_NE(e.find(dir.path().string()), std::string::npos) << e;
  EXPECT_NE(e.find("needs 0.0 GiB of RAM for its weights alone, this machine has 0.0 GiB"), std::string::npos) << e;
  EXPECT_NE(e.find("--pipeline-parallel-size"), std::string::npos) << e;
  EXPECT_NE(e.find("FP4LM_ALLOW_PAGING=1"), std::string::npos) << e;
  ::setenv("FP4LM_ALLOW_PAGING", "1", 1);
  test::LogCapture log;
  EXPECT_NE(CausalLM::load(dir.path().string(), o, lo), nullptr);
  ::unsetenv("FP4LM_ALLOW_PAGING");
  EXPECT_NE(log.text().find("exceed this machine's RAM"), std::string::npos) << log.text();
  // The default: this machine's MemTotal, which a tiny model fits.
  EXPECT_GT(physical_ram_bytes(), size_t{1} << 26);
  EXPECT_NE(CausalLM::load(dir.path().string(), o), nullptr);
}

}  // namespace
}  // namespace fp4lm::model::memory_fit_test
