// `fp4lm quantize` on DeciLMForCausalLM (Llama-Nemotron NAS) with ModelOpt's exclusions: every
// Linear of the decoder quantized — attention q/k/v/o of each width, the replace_with_linear
// blocks' linear_attn and linear_mlp (plain nn.Linear to ModelOpt), the MLPs of each ffn_mult —
// and only model.embed_tokens and lm_head listed unquantized, as ModelOpt's default NVFP4 config
// leaves them; no_op blocks have nothing to quantize. The output loads and stays within NVFP4's
// error of the unquantized model. Input: the tiny model of tests/reference/decilm_reference.h.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "common/error_norms.h"
#include "common/paths.h"
#include "engine/quantize/quantizer.h"
#include "io/json_file.h"
#include "model/causal_lm.h"
#include "reference/decilm_reference.h"
#include "reference/logits_check.h"
#include "model/load/model_loader.h"

namespace fp4lm::engine::quantize_decilm_test {
namespace {

using nlohmann::json;
using quant::QuantAlgo;

std::string scheme_of(const model::ModelLoader& l, const std::string& layer) {
  return std::string(kernels::scheme_name(l.describe(l.layer(layer)).scheme.key));
}

TEST(QuantizeDeciLM, Nvfp4QuantizesEveryBlockKindAndExcludesWhatModelOptDoes) {
  fp4lm::test::TempDir tmp;
  // hidden 32 is a multiple of 16: every Linear of the tiny model is quantizable.
  const fp4lm::test::TinyModel m = fp4lm::test::decilm_ref::make_decilm(/*tied=*/false);
  fp4lm::test::write_tiny_model(m, tmp / "in");
  QuantizeOptions q;
  q.model_dir = (tmp / "in").string();
  q.out_dir = (tmp / "out").string();
  q.exp.algo = QuantAlgo::NVFP4;
  q.progress = false;
  q.calibration = {{2, 17, 5, 96, 40, 40, 3, 62, 11, 80}, {7, 50, 29, 2, 9, 1}};
  quantize_checkpoint(q);

  const json h = io::read_json_file(q.out_dir + "/hf_quant_config.json");
  EXPECT_EQ(h["quantization"]["exclude_modules"], (json{"model.embed_tokens", "lm_head"}));
  model::ModelLoader l(io::Checkpoint::open(q.out_dir), {});
  for (const char* layer :
       {"model.layers.0.self_attn.qkv_proj", "model.layers.0.self_attn.o_proj", "model.layers.0.mlp.gate_up_proj",
        "model.layers.1.mlp.down_proj", "model.layers.2.self_attn.linear_attn", "model.layers.3.mlp.linear_mlp",
        "model.layers.4.self_attn.qkv_proj"})
    EXPECT_EQ(scheme_of(l, layer), "nvfp4_w4a4") << layer;
  EXPECT_EQ(scheme_of(l, "lm_head"), "unquantized");

  const std::vector<int32_t> toks = {1, 40, 17, 5, 96, 40, 40, 3, 62, 11, 80, 7};
  model::EngineOptions o;
  o.dtype = "float32";
  const double e = fp4lm::test::rel_rms(model::checkpoint_logits(q.out_dir, toks, o),
                                        model::checkpoint_logits(q.model_dir, toks, o));
  std::printf("[ QuantizeDeciLM ] NVFP4 vs unquantized: rel rms %.3f\n", e);
  EXPECT_GT(e, 0.005);
  EXPECT_LT(e, 0.4);
}

}  // namespace
}  // namespace fp4lm::engine::quantize_decilm_test
