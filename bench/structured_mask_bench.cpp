// Cost of structured outputs per decode step: the token mask of a JSON schema over the real Qwen3
// vocabulary (151,936 logits), computed and applied to a logits row at every step of a
// schema-valid output, first with empty caches (a new schema: every state's mask is a trie walk)
// and then warm (the same schema again: masks come from the per-state cache). The decode step it
// is compared with comes from decode_bench in the same run (--baseline-ms).
//
//   structured_mask_bench --tokenizer DIR [--baseline-ms MS] [--repeats N] [--schema city|bounded]
//
// "bounded" is a schema with numeric bounds (digit-range automata), item and property counts, a
// prefix and string formats.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "engine/structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace fp4lm;
using namespace fp4lm::engine::structured;
using Clock = std::chrono::steady_clock;

const char* kSchema = R"({"type":"object","properties":{
  "city":{"type":"string"},"country":{"type":"string","maxLength":40},"population":{"type":"integer"},
  "area_km2":{"type":"number"},"capital":{"type":"boolean"},
  "districts":{"type":"array","items":{"type":"object","properties":{"name":{"type":"string"},
     "kind":{"enum":["urban","suburban","rural"]}},"required":["name","kind"]}},
  "founded":{"type":"string","format":"date"}},
  "required":["city","country","population","capital","districts"]})";

const char* kOutput = R"({"city": "Amsterdam", "country": "The Netherlands", "population": 921402, )"
                      R"("area_km2": 219.32, "capital": true, "districts": [{"name": "Centrum", "kind": "urban"}, )"
                      R"({"name": "Nieuw-West", "kind": "suburban"}, {"name": "Noord", "kind": "rural"}], )"
                      R"("founded": "1275-10-27"})";

const char* kBoundedSchema = R"({"type":"object","properties":{
  "age":{"type":"integer","minimum":0,"maximum":120},"score":{"type":"number","minimum":-2,"exclusiveMaximum":1.5},
  "population":{"type":"integer","minimum":1000,"maximum":40000000},
  "ids":{"type":"array","items":{"type":"integer","exclusiveMinimum":0,"maximum":999},"maxItems":5},
  "pair":{"type":"array","prefixItems":[{"type":"string","format":"ipv4"},{"type":"boolean"}]},
  "contact":{"type":"string","format":"email"},
  "meta":{"type":"object","patternProperties":{"^k[0-9]$":{"type":"integer"}},"maxProperties":3}},
  "required":["age","score","population","ids","pair","contact","meta"]})";

const char* kBoundedOutput = R"({"age": 37, "score": 1.25, "population": 921402, "ids": [3, 17, 999, 250], )"
                             R"("pair": ["192.168.10.1", true], "contact": "jo.doe@example.com", )"
                             R"("meta": {"k1": 5, "k2": -3}})";

const char* schema_ = kSchema;

struct Pass {
  double mean_ms = 0, max_ms = 0, total_ms = 0;
  int steps = 0;
};

Pass run(GrammarCompiler& c, const std::vector<int32_t>& ids, int64_t vocab, int32_t eos) {
  GrammarMatcher m(c.compile({StructuredSpec::Kind::JsonSchema, schema_, {}, "bench"}));
  std::vector<float> row(static_cast<size_t>(vocab), 0.5f);
  Pass p;
  for (size_t i = 0; i <= ids.size(); ++i) {
    std::fill(row.begin(), row.end(), 0.5f);  // a fresh logits row (not timed)
    const auto t0 = Clock::now();
    m.apply(row.data(), vocab, {eos});
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    p.total_ms += ms;
    p.max_ms = std::max(p.max_ms, ms);
    ++p.steps;
    if (i == ids.size()) {
      if (row[static_cast<size_t>(eos)] != 0.5f) fmt::print(stderr, "EOS not allowed at the end\n");
      break;
    }
    if (row[static_cast<size_t>(ids[i])] != 0.5f || !m.accept(ids[i])) {
      fmt::print(stderr, "token {} at step {} rejected: the sample output does not match the schema\n", ids[i], i);
      std::exit(1);
    }
  }
  p.mean_ms = p.total_ms / p.steps;
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir;
  double baseline_ms = 0;
  int repeats = 3;
  bool bounded = false;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--tokenizer") dir = argv[i + 1];
    else if (a == "--baseline-ms") baseline_ms = std::stod(argv[i + 1]);
    else if (a == "--repeats") repeats = std::stoi(argv[i + 1]);
    else if (a == "--schema" && (std::string(argv[i + 1]) == "city" || std::string(argv[i + 1]) == "bounded"))
      bounded = std::string(argv[i + 1]) == "bounded";
    else {
      fmt::print(stderr, "unknown flag {}\n", a);
      return 2;
    }
  }
  if (dir.empty()) {
    fmt::print(stderr, "usage: structured_mask_bench --tokenizer DIR [--baseline-ms MS] [--repeats N] [--schema city|bounded]\n");
    return 2;
  }
  auto tok = tokenizer::Tokenizer::from_dir(dir);
  const int64_t vocab = 151936;
  const int32_t eos = *tok->token_to_id("<|im_end|>");
  if (bounded) schema_ = kBoundedSchema;
  const auto ids = tok->encode(bounded ? kBoundedOutput : kOutput);
  auto t0 = Clock::now();
  auto v = std::make_shared<TokenVocabulary>(*tok, vocab);
  const double vocab_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  fmt::print("vocabulary trie: {} tokens, {} nodes, built in {:.1f} ms (once per server)\n", vocab, v->num_nodes(),
             vocab_ms);
  fmt::print("output: {} tokens + EOS\n", ids.size());
  for (int r = 0; r < repeats; ++r) {
    GrammarCompiler c(v);
    t0 = Clock::now();
    c.compile({StructuredSpec::Kind::JsonSchema, schema_, {}, "bench"});
    const double compile_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const Pass cold = run(c, ids, vocab, eos);
    const Pass warm = run(c, ids, vocab, eos);
    fmt::print("repeat {}: compile {:.2f} ms | cold mask+apply per step mean {:.3f} ms, max {:.2f} ms | "
               "warm mean {:.3f} ms, max {:.3f} ms",
               r, compile_ms, cold.mean_ms, cold.max_ms, warm.mean_ms, warm.max_ms);
    if (baseline_ms > 0)
      fmt::print(" | vs decode step {:.1f} ms: cold {:.1f}%, warm {:.2f}%", baseline_ms,
                 100 * cold.mean_ms / baseline_ms, 100 * warm.mean_ms / baseline_ms);
    fmt::print("\n");
  }
  return 0;
}
