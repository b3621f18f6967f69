// Tokenizer throughput and load time on the real Qwen3 tokenizer (../shared/tokenizers/qwen3, or
// the directory given as argv[1]).
//   build-tok/bench/tokenizer_bench [TOKENIZER_DIR]
// Baselines measured in the same run: a plain nlohmann DOM parse of tokenizer.json (load), and
// the PCRE2 pre-tokenizer regex alone over the same text (encode).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"

namespace {

using Clock = std::chrono::steady_clock;
using fp4lm::tokenizer::Regex;
using fp4lm::tokenizer::StreamDecoder;
using fp4lm::tokenizer::Tokenizer;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

template <typename F>
double median_seconds(int reps, F&& f) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    f();
    t.push_back(seconds_since(t0));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// ~1 MB of text assembled from sentences in random order, with random numbers mixed in, so the
// word cache sees a realistic (Zipf-like) mix of repeated and fresh words.
std::string make_text(const std::vector<std::string>& sentences, size_t bytes, unsigned seed) {
  std::mt19937 rng(seed);
  std::string out;
  while (out.size() < bytes) {
    out += sentences[rng() % sentences.size()];
    if (rng() % 4 == 0) {
      out.push_back(' ');
      out.append(std::to_string(rng() % 100000));
      out.push_back('.');
    }
    out += (rng() % 8 == 0) ? "\n\n" : " ";
  }
  return out;
}

const std::vector<std::string> kEnglish = {
    "The quick brown fox jumps over the lazy dog.",
    "In 1969, two astronauts walked on the surface of the Moon while a third orbited above.",
    "Tokenization splits text into sub-word units that a language model can embed.",
    "She couldn't believe they'd already finished the project; it wasn't due until Friday!",
    "Compilers translate high-level source code into machine instructions for a processor.",
    "The committee's report recommended several changes to the city's transportation budget.",
    "Photosynthesis converts light energy into chemical energy stored in glucose molecules.",
    "\"Where are you going?\" he asked, glancing at the clock on the wall.",
    "Memory bandwidth, not arithmetic, usually limits the speed of large matrix-vector products.",
    "Visit https://example.org/docs?page=2&lang=en for the full reference manual.",
    "def main():\n    for i in range(10):\n        print(f\"value={i * 2}\")",
    "Quarterly revenue rose 12.5% year over year, beating analysts' expectations.",
};

const std::vector<std::string> kMixed = {
    "東京は日本の首都であり、世界有数の大都市です。",
    "中文分词是自然语言处理中的基础任务之一。",
    "Москва — столица России и крупнейший город страны.",
    "مرحبا بالعالم، هذه جملة باللغة العربية.",
    "नमस्ते दुनिया, यह एक हिंदी वाक्य है।",
    "한국어 문장은 띄어쓰기를 사용합니다.",
    "Emoji: 🎉🚀👍🏽👩‍💻 and symbols ∑∫√π≈∞.",
    "Grüße aus Köln — naïve café résumé façade.",
    "The quick brown fox jumps over the lazy dog.",
    "Ελληνικά: Καλημέρα κόσμε, τι κάνεις;",
};

}  // namespace

int main(int argc, char** argv) {
  std::filesystem::path dir = argc > 1 ? std::filesystem::path(argv[1])
                                       : std::filesystem::path(__FILE__).parent_path() / ".." / ".." / "shared" / "tokenizers" / "qwen3";
  auto json_path = dir / "tokenizer.json";
  if (!std::filesystem::exists(json_path)) {
    std::fprintf(stderr, "tokenizer.json not found in %s\n", dir.string().c_str());
    return 1;
  }
  std::ifstream in(json_path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string json_text = ss.str();

  // Load time (median of 5) against a plain DOM parse of the same bytes.
  std::unique_ptr<Tokenizer> tok;
  double t_load = median_seconds(5, [&] { tok = Tokenizer::from_dir(dir.string()); });
  double t_dom = median_seconds(5, [&] { auto j = nlohmann::json::parse(json_text); });
  std::printf("load %s (%.1f MB): %.0f ms   [baseline nlohmann DOM parse only: %.0f ms, ratio %.2fx]\n",
              json_path.string().c_str(), json_text.size() / 1e6, t_load * 1e3, t_dom * 1e3, t_dom / t_load);

  Regex pretok(R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
               false, "bench");
  std::printf("pcre2 jit: %s\n", pretok.jit() ? "yes" : "no");

  struct Corpus {
    const char* name;
    std::string text;
  };
  Corpus corpora[] = {{"english", make_text(kEnglish, 1 << 20, 1)}, {"mixed-script", make_text(kMixed, 1 << 20, 2)}};
  for (const auto& c : corpora) {
    double mb = c.text.size() / 1e6;
    // The first pass fills the word cache; later passes show the warm rate.
    std::unique_ptr<Tokenizer> fresh = Tokenizer::from_dir(dir.string());
    size_t n_ids = 0;
    auto t0 = Clock::now();
    n_ids = fresh->encode(c.text).size();
    double t_cold = seconds_since(t0);
    double t_warm = median_seconds(5, [&] { n_ids = fresh->encode(c.text).size(); });
    double t_regex = median_seconds(5, [&] { volatile size_t n = pretok.find_all(c.text).size(); (void)n; });
    std::vector<int32_t> ids = fresh->encode(c.text);
    double t_dec = median_seconds(5, [&] { volatile size_t n = fresh->decode(ids).size(); (void)n; });
    double t_stream = median_seconds(3, [&] {
      StreamDecoder sd(*fresh);
      size_t n = 0;
      for (int32_t id : ids) n += sd.push(id).size();
      n += sd.flush().size();
      volatile size_t keep = n;
      (void)keep;
    });
    std::printf("%-12s %.2f MB, %zu tokens: encode %.1f MB/s (first pass, cold cache %.1f MB/s)   "
                "[baseline regex pre-split alone %.1f MB/s, encode/regex %.2f]\n",
                c.name, mb, n_ids, mb / t_warm, mb / t_cold, mb / t_regex, t_regex / t_warm);
    std::printf("%-12s decode %.1f MB/s, stream decode %.1f MB/s (%.2f us/token)\n", c.name,
                mb / t_dec, mb / t_stream, t_stream / static_cast<double>(ids.size()) * 1e6);
  }
  return 0;
}
