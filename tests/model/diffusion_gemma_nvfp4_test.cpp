// DiffusionGemma from ModelOpt NVFP4 checkpoints of the tiny random model
// (scripts/make_diffusion_gemma_nvfp4_goldens.py): every Linear of the blocks, the experts and the
// self-conditioning MLP stored as NVFP4 and run by the quantized layers (model::Linear /
// FusedMoe), against transformers' float64 logits with the weights replaced by their dequantized
// values. W4A16_NVFP4 (float32 activations): within 1e-4 of the range, argmax equal. NVFP4 W4A4
// (the published release's format): against the same reference with the activations quantized
// by NVFP4's run-time rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/checkpoint_edit.h"
#include "common/paths.h"
#include "core/error.h"
#include "model/diffusion_gemma.h"

namespace fp4lm::model::diffusion_gemma_nvfp4_test {
namespace {

using nlohmann::json;

std::filesystem::path fixture(const std::string& name) {
  return test::source_dir() / "tests" / "model" / "fixtures" / "diffusion_gemma" / name;
}

std::vector<double> read_f64(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << path;
  in.seekg(0, std::ios::end);
  std::vector<double> v(static_cast<size_t>(in.tellg()) / sizeof(double));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double)));
  return v;
}

struct Measured {
  double rel = 0;            // max |got - want| / max |want|
  int64_t argmax_equal = 0;  // rows whose argmax agrees
  int64_t rows = 0;
};

Measured compare(const std::vector<float>& got, const std::vector<double>& want, int64_t vocab, const char* what) {
  Measured m;
  EXPECT_EQ(got.size(), want.size()) << what;
  if (got.size() != want.size()) return m;
  double diff = 0, scale = 0;
  for (size_t k = 0; k < want.size(); ++k) {
    diff = std::max(diff, std::abs(got[k] - want[k]));
    scale = std::max(scale, std::abs(want[k]));
  }
  m.rel = diff / scale;
  m.rows = static_cast<int64_t>(want.size()) / vocab;
  for (int64_t r = 0; r < m.rows; ++r) {
    const auto g = std::max_element(got.begin() + r * vocab, got.begin() + (r + 1) * vocab) - (got.begin() + r * vocab);
    const auto w =
        std::max_element(want.begin() + r * vocab, want.begin() + (r + 1) * vocab) - (want.begin() + r * vocab);
    m.argmax_equal += g == w;
  }
  std::printf("%s: max |fp4lm - dequantized float64| = %.3g (%.3g of the range %.3g), argmax equal %lld / %lld\n",
              what, diff, m.rel, scale, static_cast<long long>(m.argmax_equal), static_cast<long long>(m.rows));
  return m;
}

// The encoder over the prompt, the decoder over the canvas without and with self-conditioning.
// `expected`: the reference files' prefix ("expected_" weight-only, "expected_w4a4_").
std::vector<Measured> run(const std::string& name, const std::string& expected = "expected_",
                          const EngineOptions& opts = {}) {
  const std::filesystem::path d = fixture(name);
  const auto m = DiffusionGemma::load(d.string(), opts);
  std::ifstream in(d / "goldens.json");
  const json g = json::parse(in);
  const int64_t V = m->config().vocab_size;
  DiffusionGemmaCache cache = m->new_cache();
  std::vector<Measured> out;
  const std::string tag = name + " ";
  out.push_back(compare(m->encode(cache, g["prompt_ids"].get<std::vector<int32_t>>(), true),
                        read_f64(d / (expected + "encoder_logits.f64")), V, (tag + "encoder").c_str()));
  const auto canvas = g["canvas"].get<std::vector<int32_t>>();
  std::vector<float> first = m->decode(cache, canvas, {});
  out.push_back(compare(first, read_f64(d / (expected + "decoder_logits.f64")), V, (tag + "decoder").c_str()));
  for (float& v : first) v /= g["self_conditioning_divisor"].get<float>();
  out.push_back(compare(m->decode(cache, canvas, first), read_f64(d / (expected + "decoder_sc_logits.f64")), V,
                        (tag + "decoder, self-conditioned").c_str()));
  return out;
}

TEST(DiffusionGemmaNvfp4, WeightOnlyMatchesTheDequantizedFloat64Reference) {
  for (const Measured& m : run("tiny_w4a16_nvfp4")) {
    EXPECT_LT(m.rel, 1e-4);
    EXPECT_EQ(m.argmax_equal, m.rows);
  }
}

TEST(DiffusionGemmaNvfp4, WeightsStayPacked) {
  // The float32 fixture's Linear / MoE weights against the NVFP4 one's: 4-bit codes plus an E4M3
  // scale per 16 (4.5 bits a weight) rather than 32 bits; the router stays float32 in both.
  const auto f = DiffusionGemma::load(fixture("tiny").string());
  const auto q = DiffusionGemma::load(fixture("tiny_w4a16_nvfp4").string());
  std::printf("weight bytes: float32 fixture %zu, NVFP4 fixture %zu\n", f->weight_bytes(), q->weight_bytes());
  EXPECT_LT(q->weight_bytes() * 4, f->weight_bytes());
}

TEST(DiffusionGemmaNvfp4, W4A4MatchesTheReferenceWithQuantizedActivations) {
  // NVFP4 W4A4, as the published checkpoint runs: each quantized module's input is quantized to
  // NVFP4 with its input_scale. The reference applies the same rule (quant/nvfp4.h) in float64.
  for (const Measured& m : run("tiny_nvfp4", "expected_w4a4_")) {
    EXPECT_LT(m.rel, 1e-4);
    EXPECT_EQ(m.argmax_equal, m.rows);
  }
}

// The serving engine's batch (DiffusionGemma::encode_batch / decode_batch): three sequences of
// different lengths and positions, encoded together and then decoded together (one canvas with
// self-conditioning logits, two without), give each sequence's cache and logits bit for bit as
// the single-sequence calls: unquantized, W4A16_NVFP4, NVFP4 W4A4, and W4A4 with
// --a16-max-tokens 8 (a lone canvas's 8 rows run at W4A16, the batch's 24 must too).
struct Sequence {
  std::vector<int32_t> prompt, canvas;
};

std::vector<Sequence> batch_sequences() {
  return {{{2, 17, 33, 5, 60, 41, 12, 77, 9, 23}, {0, 44, 0, 0, 13, 91, 0, 7}},
          {{2, 30, 9}, {5, 5, 0, 0, 0, 0, 1, 2}},
          {{2, 50, 8, 70, 71, 72, 73}, {0, 0, 0, 0, 0, 0, 0, 0}}};
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << what;
}

void expect_batched_equals_alone(const std::string& name, const EngineOptions& opts) {
  const auto m = DiffusionGemma::load(fixture(name).string(), opts);
  const std::vector<Sequence> seqs = batch_sequences();
  const int64_t V = m->config().vocab_size;
  // Alone: each sequence's encoder pass, its decoder pass, and (the first) a self-conditioned one.
  std::vector<DiffusionGemmaCache> alone;
  std::vector<std::vector<float>> alone_logits;
  std::vector<float> sc;
  for (size_t i = 0; i < seqs.size(); ++i) {
    alone.push_back(m->new_cache());
    m->encode(alone.back(), seqs[i].prompt, false);
    alone_logits.push_back(m->decode(alone.back(), seqs[i].canvas, {}));
  }
  sc = alone_logits[0];
  for (float& v : sc) v /= 0.7f;
  const std::vector<float> alone_sc = m->decode(alone[0], seqs[0].canvas, sc);
  // Together.
  std::vector<DiffusionGemmaCache> caches;
  for (size_t i = 0; i < seqs.size(); ++i) caches.push_back(m->new_cache());
  std::vector<DiffusionGemma::EncodeItem> enc;
  for (size_t i = 0; i < seqs.size(); ++i) enc.push_back({&caches[i], seqs[i].prompt});
  m->encode_batch(enc);
  for (size_t i = 0; i < seqs.size(); ++i) {
    ASSERT_EQ(caches[i].length, alone[i].length);
    for (size_t l = 0; l < caches[i].layers.size(); ++l) {
      expect_same_bits(caches[i].layers[l].k, alone[i].layers[l].k, name + " cache k");
      expect_same_bits(caches[i].layers[l].v, alone[i].layers[l].v, name + " cache v");
    }
  }
  std::vector<DiffusionGemma::DecodeItem> dec;
  dec.push_back({&caches[0], seqs[0].canvas, sc});
  for (size_t i = 1; i < seqs.size(); ++i) dec.push_back({&caches[i], seqs[i].canvas, {}});
  const std::vector<std::vector<float>> together = m->decode_batch(dec);
  ASSERT_EQ(together.size(), seqs.size());
  expect_same_bits(together[0], alone_sc, name + " decoder, self-conditioned");
  for (size_t i = 1; i < seqs.size(); ++i) {
    ASSERT_EQ(static_cast<int64_t>(together[i].size()), 8 * V);
    expect_same_bits(together[i], alone_logits[i], name + " decoder " + std::to_string(i));
  }
}

TEST(DiffusionGemmaBatch, BatchedEncoderAndDecoderPassesEqualEachSequenceAloneBitForBit) {
  expect_batched_equals_alone("tiny", {});
  expect_batched_equals_alone("tiny_w4a16_nvfp4", {});
  expect_batched_equals_alone("tiny_nvfp4", {});
  EngineOptions a16;
  a16.a16_max_tokens = 8;
  expect_batched_equals_alone("tiny_nvfp4", a16);
}

TEST(DiffusionGemmaBatch, A16MaxTokensChangesALoneCanvasSoTheBatchTestAbovesCaseIsReal) {
  // Without the per-sequence choice the 24-row batch would run at W4A4: the two rules differ here.
  const Sequence s = batch_sequences()[1];
  EngineOptions a16;
  a16.a16_max_tokens = 8;
  std::vector<std::vector<float>> got;
  for (const EngineOptions& o : {EngineOptions{}, a16}) {
    const auto m = DiffusionGemma::load(fixture("tiny_nvfp4").string(), o);
    DiffusionGemmaCache c = m->new_cache();
    m->encode(c, s.prompt, false);
    got.push_back(m->decode(c, s.canvas, {}));
  }
  ASSERT_EQ(got[0].size(), got[1].size());
  EXPECT_NE(std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float)), 0);
}

// A copy of tiny_nvfp4 with encoder copies (model.encoder.language_model.*) of layer 0's q_proj
// tensors added, `change` applied to each copy's bytes.
std::string with_encoder_copies(const test::TempDir& d, const std::function<void(test::EditedTensor&)>& change) {
  test::copy_dir(fixture("tiny_nvfp4"), d.path());
  std::vector<test::EditedTensor> extra;
  test::edit_tensors(d.path(), [&](test::EditedTensor& t) {
    if (t.name.rfind("model.decoder.layers.0.self_attn.q_proj.", 0) == 0) {
      test::EditedTensor c = t;
      c.name = "model.encoder.language_model." + t.name.substr(std::string("model.decoder.").size());
      change(c);
      extra.push_back(std::move(c));
    }
    return true;
  });
  test::edit_tensors(d.path(), [](test::EditedTensor&) { return true; }, extra);
  return d.path().string();
}

TEST(DiffusionGemmaNvfp4, EncoderCopiesOfTiedTensors) {
  {
    // Equal bytes (and an input_scale calibrated on the encoder's own inputs): the decoder's are read.
    test::TempDir d;
    const std::string dir = with_encoder_copies(d, [](test::EditedTensor& t) {
      if (t.name.ends_with(".input_scale")) t.bytes[3] ^= 0x01;
    });
    const auto m = DiffusionGemma::load(dir);
    DiffusionGemmaCache cache = m->new_cache();
    std::ifstream in(fixture("tiny_nvfp4") / "goldens.json");
    const json g = json::parse(in);
    const Measured r = compare(m->encode(cache, g["prompt_ids"].get<std::vector<int32_t>>(), true),
                               read_f64(fixture("tiny_nvfp4") / "expected_w4a4_encoder_logits.f64"),
                               m->config().vocab_size, "tiny_nvfp4 with encoder copies, encoder");
    EXPECT_LT(r.rel, 1e-4);
  }
  {
    // A weight that differs: the two passes would need their own layers; refused by name.
    test::TempDir d;
    const std::string dir = with_encoder_copies(d, [](test::EditedTensor& t) {
      if (t.name.ends_with(".weight")) t.bytes[0] ^= 0x11;
    });
    try {
      DiffusionGemma::load(dir);
      ADD_FAILURE() << "loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("tensor 'model.encoder.language_model.layers.0.self_attn.q_proj.weight' "
                                           "differs from (or has no) decoder copy"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace fp4lm::model::diffusion_gemma_nvfp4_test
